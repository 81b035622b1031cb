//! The arithmetic of judging (AgentViSS, section 4 and appendix B; AgentSense's PSI), apart from
//! any model or stage: the three labels and the panel's vote ([`label`]), the task score
//! ([`score`]), how far judges agree ([`agreement`]), how sure a score is ([`interval`]) and how
//! much a template's scores swing over its instances ([`psi`]), and SOTOPIA-EVAL's seven
//! range-checked dimensions ([`sotopia`]). The `evaluate` stage and the report build on it.

pub mod agreement;
pub mod goal;
pub mod interval;
pub mod judgement;
pub mod label;
pub mod psi;
pub mod score;
pub mod sotopia;

/// The agreement coefficients and the chi-square tail against the values statsmodels,
/// krippendorff and scipy compute for the same fixture tables (`testdata/reference.py` wrote
/// `testdata/reference.json`).
#[cfg(test)]
mod reference_tests {
    use serde::Deserialize;

    use crate::agreement::{fleiss_kappa, krippendorff_alpha_ordinal};
    use crate::label::Label;

    #[derive(Deserialize)]
    struct Reference {
        tables: Vec<Table>,
        chi_square: Vec<ChiSquare>,
    }

    #[derive(Deserialize)]
    struct Table {
        name: String,
        tasks: Vec<Vec<Option<usize>>>,
        fleiss_kappa_complete_tasks: f64,
        krippendorff_alpha_ordinal: f64,
    }

    #[derive(Deserialize)]
    struct ChiSquare {
        statistic: f64,
        degrees_of_freedom: usize,
        upper_tail: f64,
    }

    fn reference() -> Reference {
        serde_json::from_str(include_str!("../testdata/reference.json")).unwrap()
    }

    #[test]
    fn fleiss_kappa_and_krippendorff_alpha_match_the_reference_implementations() {
        let reference = reference();
        assert_eq!(reference.tables.len(), 4);
        for table in &reference.tables {
            let tasks: Vec<Vec<Option<Label>>> = table
                .tasks
                .iter()
                .map(|row| row.iter().map(|v| v.map(|rank| Label::ALL[rank])).collect())
                .collect();
            let complete: Vec<Vec<Label>> = tasks
                .iter()
                .filter_map(|row| row.iter().copied().collect::<Option<Vec<Label>>>())
                .collect();
            let kappa = fleiss_kappa(&complete).unwrap();
            assert!(
                (kappa - table.fleiss_kappa_complete_tasks).abs() < 1e-9,
                "{}: kappa {kappa} vs {}",
                table.name,
                table.fleiss_kappa_complete_tasks
            );
            let alpha = krippendorff_alpha_ordinal(&tasks).unwrap();
            assert!(
                (alpha - table.krippendorff_alpha_ordinal).abs() < 1e-9,
                "{}: alpha {alpha} vs {}",
                table.name,
                table.krippendorff_alpha_ordinal
            );
        }
    }

    #[test]
    fn the_variance_tests_tail_matches_scipy() {
        for case in reference().chi_square {
            // A template of degrees + 1 instances 0, 1, 2, ... whose population variance is
            // chosen so that its statistic is the reference's.
            let values: Vec<f64> = (0..=case.degrees_of_freedom).map(|v| v as f64).collect();
            let degrees = case.degrees_of_freedom as f64;
            let sample_variance =
                crate::psi::population_variance(&values) * values.len() as f64 / degrees;
            let population = degrees * sample_variance / case.statistic;
            let test = crate::psi::variance_test(&values, population, 0.05).unwrap();
            assert!((test.statistic - case.statistic).abs() < 1e-9);
            assert!(
                (test.p_value - case.upper_tail).abs() < 1e-10,
                "chi2({}) at {}: {} vs {}",
                case.degrees_of_freedom,
                case.statistic,
                test.p_value,
                case.upper_tail
            );
            assert_eq!(test.abnormal, case.upper_tail < 0.05);
        }
    }
}
