//! AgentSense's sensitivity to who the characters are: a template (an anonymised scenario) is
//! instantiated with several synthetic casts, and a model whose score swings between instances
//! of one template depends on the cast rather than on the situation. PSI is the mean over
//! templates of the standard deviation of a metric over the template's instances; a template is
//! abnormal when its instances vary more than the whole population does, by a chi-square test
//! of its variance.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// The PSI of a metric and how many templates it averages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Psi {
    pub value: f64,
    /// Templates with two or more instances (one instance has no spread and is left out).
    pub templates: usize,
}

/// PSI over `templates`, each the metric's values for its instances. The standard deviation is
/// the population one (divided by the number of instances), as numpy's default computes it.
/// `None` when no template has two instances.
pub fn psi(templates: &[Vec<f64>]) -> Option<Psi> {
    let spreads: Vec<f64> = templates
        .iter()
        .filter(|values| values.len() >= 2)
        .map(|values| population_variance(values).sqrt())
        .collect();
    (!spreads.is_empty()).then(|| Psi {
        value: spreads.iter().sum::<f64>() / spreads.len() as f64,
        templates: spreads.len(),
    })
}

/// The chi-square test of one template's variance against the population's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VarianceTest {
    pub instances: usize,
    /// The template's sample variance (divided by instances - 1).
    pub variance: f64,
    /// (instances - 1) x variance / population variance, chi-square with instances - 1
    /// degrees of freedom when the template varies as the population does.
    pub statistic: f64,
    /// The upper tail: the chance of a variance this large or larger.
    pub p_value: f64,
    /// p below the significance level: the template's instances vary more than the population.
    pub abnormal: bool,
}

/// Tests `values` (one template's instances) against `population`, the variance of all
/// instances of all templates, at `significance` (AgentSense: 0.05). `None` for fewer than two
/// instances or a population without variance.
pub fn variance_test(values: &[f64], population: f64, significance: f64) -> Option<VarianceTest> {
    let instances = values.len();
    if instances < 2 || population <= 0.0 {
        return None;
    }
    let degrees = (instances - 1) as f64;
    let variance = population_variance(values) * instances as f64 / degrees;
    let statistic = degrees * variance / population;
    let p_value = ChiSquared::new(degrees).ok()?.sf(statistic);
    Some(VarianceTest {
        instances,
        variance,
        statistic,
        p_value,
        abnormal: p_value < significance,
    })
}

/// The variance of `values` divided by their number (0 for none).
pub fn population_variance(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psi_is_the_mean_of_population_standard_deviations() {
        // Template 1: 2, 4 -> sd 1. Template 2: 1, 1, 1 -> 0. Template 3: 0, 6 -> 3.
        // A lone instance is left out.
        let templates = vec![
            vec![2.0, 4.0],
            vec![1.0, 1.0, 1.0],
            vec![0.0, 6.0],
            vec![5.0],
        ];
        let psi = psi(&templates).unwrap();
        assert!((psi.value - 4.0 / 3.0).abs() < 1e-12, "{psi:?}");
        assert_eq!(psi.templates, 3);
        assert_eq!(super::psi(&[vec![1.0]]), None);
    }

    #[test]
    fn a_template_that_swings_far_more_than_the_population_is_abnormal() {
        // Sample variance of 0, 10, 0, 10 is 100/3; against a population variance of 4 the
        // statistic is 3 x (100/3) / 4 = 25 on 3 degrees of freedom: p = 1.544e-5.
        let wild = variance_test(&[0.0, 10.0, 0.0, 10.0], 4.0, 0.05).unwrap();
        assert!((wild.statistic - 25.0).abs() < 1e-12);
        assert!((wild.p_value - 1.544_05e-5).abs() < 1e-9, "{wild:?}");
        assert!(wild.abnormal);
        // 4, 6, 4, 6: variance 4/3, statistic 1 on 3 degrees of freedom: p = 0.8013.
        let calm = variance_test(&[4.0, 6.0, 4.0, 6.0], 4.0, 0.05).unwrap();
        assert!((calm.p_value - 0.801252).abs() < 1e-6, "{calm:?}");
        assert!(!calm.abnormal);
        assert_eq!(variance_test(&[1.0], 4.0, 0.05), None);
        assert_eq!(variance_test(&[1.0, 2.0], 0.0, 0.05), None);
    }
}
