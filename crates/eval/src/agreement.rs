//! How far the judges of a panel agree (AgentViSS, tables 9 and 10, and beyond): Fleiss' kappa
//! over the tasks every judge labelled, the share of tasks where all agree or all differ,
//! Krippendorff's alpha with the labels as an ordinal scale (it takes missing judgements as they
//! are), and each judge's own label counts, so a lenient or a harsh judge shows.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::label::Label;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgreementError {
    #[error("no task has enough judgements to measure agreement")]
    NoTasks,
    #[error(
        "Fleiss' kappa needs the same number of judges on every task: task {task} has {got}, \
         the first has {expected}"
    )]
    UnequalPanels {
        task: usize,
        got: usize,
        expected: usize,
    },
    #[error("agreement needs at least two judges per task, the panel has {judges}")]
    TooFewJudges { judges: usize },
    #[error("agreement is undefined: every judgement is {label}, so chance alone explains it")]
    OneLabelOnly { label: Label },
    #[error("agreement is undefined: every call is {category}, so chance alone explains it")]
    OneCategoryOnly { category: String },
}

/// Fleiss' kappa of `tasks`, each the labels of the same number of judges (two or more).
pub fn fleiss_kappa(tasks: &[Vec<Label>]) -> Result<f64, AgreementError> {
    fleiss_kappa_of(tasks).map_err(|error| match error {
        AgreementError::OneCategoryOnly { .. } => {
            AgreementError::OneLabelOnly { label: tasks[0][0] }
        }
        other => other,
    })
}

/// Fleiss' kappa over any categories (a reviewer's accept / edit / reject): `tasks` each the
/// calls of the same number of raters, two or more.
pub fn fleiss_kappa_of<T: Ord + Clone + fmt::Display>(
    tasks: &[Vec<T>],
) -> Result<f64, AgreementError> {
    let raters = tasks.first().ok_or(AgreementError::NoTasks)?.len();
    if raters < 2 {
        return Err(AgreementError::TooFewJudges { judges: raters });
    }
    if let Some((task, calls)) = tasks.iter().enumerate().find(|(_, l)| l.len() != raters) {
        return Err(AgreementError::UnequalPanels {
            task,
            got: calls.len(),
            expected: raters,
        });
    }
    let m = raters as f64;
    let mut totals: BTreeMap<&T, usize> = BTreeMap::new();
    let mut observed = 0.0;
    for calls in tasks {
        let mut counts: BTreeMap<&T, usize> = BTreeMap::new();
        for call in calls {
            *counts.entry(call).or_default() += 1;
            *totals.entry(call).or_default() += 1;
        }
        let agreeing_pairs: f64 = counts.values().map(|&c| (c * c) as f64).sum::<f64>() - m;
        observed += agreeing_pairs / (m * (m - 1.0));
    }
    let n = tasks.len() as f64;
    if totals.len() == 1 {
        return Err(AgreementError::OneCategoryOnly {
            category: tasks[0][0].to_string(),
        });
    }
    let observed = observed / n;
    let expected: f64 = totals
        .values()
        .map(|&total| (total as f64 / (n * m)).powi(2))
        .sum();
    Ok((observed - expected) / (1.0 - expected))
}

/// Cohen's kappa of two raters' calls on the same tasks, one pair a task.
pub fn cohen_kappa<T: Ord + Clone + fmt::Display>(pairs: &[(T, T)]) -> Result<f64, AgreementError> {
    if pairs.is_empty() {
        return Err(AgreementError::NoTasks);
    }
    let n = pairs.len() as f64;
    let observed = pairs.iter().filter(|(a, b)| a == b).count() as f64 / n;
    let mut first: BTreeMap<&T, usize> = BTreeMap::new();
    let mut second: BTreeMap<&T, usize> = BTreeMap::new();
    for (a, b) in pairs {
        *first.entry(a).or_default() += 1;
        *second.entry(b).or_default() += 1;
    }
    let expected: f64 = first
        .iter()
        .map(|(call, &count)| count as f64 / n * second.get(call).copied().unwrap_or(0) as f64 / n)
        .sum();
    if expected >= 1.0 {
        return Err(AgreementError::OneCategoryOnly {
            category: pairs[0].0.to_string(),
        });
    }
    Ok((observed - expected) / (1.0 - expected))
}

/// Krippendorff's alpha of `tasks` (per task, each judge's label or `None` where it gave none),
/// with the ordinal distance of the three labels. Tasks with fewer than two labels carry no
/// information about agreement and are left out, as the coefficient defines.
pub fn krippendorff_alpha_ordinal(tasks: &[Vec<Option<Label>>]) -> Result<f64, AgreementError> {
    // The coincidence matrix: every ordered pair of labels two judges gave one task, weighted
    // 1 / (labels on that task - 1).
    let mut coincidences = [[0.0f64; 3]; 3];
    for labels in tasks {
        let given: Vec<usize> = labels.iter().flatten().map(|l| l.rank()).collect();
        if given.len() < 2 {
            continue;
        }
        let weight = 1.0 / (given.len() - 1) as f64;
        for (i, &c) in given.iter().enumerate() {
            for (j, &k) in given.iter().enumerate() {
                if i != j {
                    coincidences[c][k] += weight;
                }
            }
        }
    }
    let marginals: [f64; 3] = coincidences.map(|row| row.iter().sum());
    let total: f64 = marginals.iter().sum();
    if total < 2.0 {
        return Err(AgreementError::NoTasks);
    }
    if let Some(rank) = marginals.iter().position(|&m| m == total) {
        return Err(AgreementError::OneLabelOnly {
            label: Label::ALL[rank],
        });
    }
    // Ordinal distance: how many pairable values lie between the two labels, the labels'
    // own halves included.
    let distance = |c: usize, k: usize| {
        let (low, high) = (c.min(k), c.max(k));
        let between: f64 = marginals[low..=high].iter().sum();
        (between - (marginals[c] + marginals[k]) / 2.0).powi(2)
    };
    let mut disagreement_observed = 0.0;
    let mut disagreement_expected = 0.0;
    for c in 0..3 {
        for k in 0..3 {
            disagreement_observed += coincidences[c][k] * distance(c, k);
            disagreement_expected += marginals[c] * marginals[k] * distance(c, k);
        }
    }
    Ok(1.0 - (total - 1.0) * disagreement_observed / disagreement_expected)
}

/// Of the tasks every judge labelled: how many, and on how many all gave one label or all gave
/// different labels (possible only for panels of two or three).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgreementCounts {
    pub tasks: usize,
    pub all_agree: usize,
    pub all_differ: usize,
}

impl AgreementCounts {
    pub fn of(tasks: &[Vec<Label>]) -> AgreementCounts {
        let mut out = AgreementCounts::default();
        for labels in tasks.iter().filter(|labels| labels.len() >= 2) {
            out.tasks += 1;
            let counts = counts_of(labels.iter().copied());
            if counts.contains(&labels.len()) {
                out.all_agree += 1;
            }
            if counts.iter().all(|&c| c <= 1) {
                out.all_differ += 1;
            }
        }
        out
    }

    /// Shares from 0 to 1; `None` without tasks.
    pub fn all_agree_rate(&self) -> Option<f64> {
        (self.tasks > 0).then(|| self.all_agree as f64 / self.tasks as f64)
    }

    pub fn all_differ_rate(&self) -> Option<f64> {
        (self.tasks > 0).then(|| self.all_differ as f64 / self.tasks as f64)
    }
}

/// One judge's labels over all tasks, counted worst to best, and the tasks it left unlabelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeLabels {
    pub counts: [usize; 3],
    pub missing: usize,
}

/// Per judge (the column of `tasks`), its label counts. `tasks` rows are one judgement per
/// configured judge, in the panel's order.
pub fn judge_labels(tasks: &[Vec<Option<Label>>], judges: usize) -> Vec<JudgeLabels> {
    let mut out = vec![JudgeLabels::default(); judges];
    for labels in tasks {
        for (judge, label) in out.iter_mut().zip(labels) {
            match label {
                Some(label) => judge.counts[label.rank()] += 1,
                None => judge.missing += 1,
            }
        }
    }
    out
}

fn counts_of(labels: impl IntoIterator<Item = Label>) -> [usize; 3] {
    let mut counts = [0; 3];
    for label in labels {
        counts[label.rank()] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cohen_kappa_matches_the_worked_example() {
        // 50 tasks: both yes 20, both no 15, first yes second no 5, first no second yes 10.
        // p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.4.
        let mut pairs = Vec::new();
        pairs.extend(std::iter::repeat_n(("yes", "yes"), 20));
        pairs.extend(std::iter::repeat_n(("no", "no"), 15));
        pairs.extend(std::iter::repeat_n(("yes", "no"), 5));
        pairs.extend(std::iter::repeat_n(("no", "yes"), 10));
        assert!((cohen_kappa(&pairs).unwrap() - 0.4).abs() < 1e-12);
        assert!(matches!(
            cohen_kappa(&[("a", "a"), ("a", "a")]),
            Err(AgreementError::OneCategoryOnly { .. })
        ));
    }

    #[test]
    fn fleiss_over_any_categories_equals_fleiss_over_labels() {
        let tasks = vec![vec![A, A, P], vec![N, N, N], vec![A, P, P], vec![P, P, A]];
        let named: Vec<Vec<String>> = tasks
            .iter()
            .map(|t| t.iter().map(|l| format!("{l:?}")).collect())
            .collect();
        assert_eq!(
            fleiss_kappa(&tasks).unwrap(),
            fleiss_kappa_of(&named).unwrap()
        );
    }
    use crate::label::Label::{Achieved as A, NotAchieved as N, PartiallyAchieved as P};

    #[test]
    fn fleiss_kappa_of_a_hand_computed_table() {
        // Four tasks, three judges. Per task sum(n^2): 9, 5, 3, 5 -> P_i = 1, 1/3, 0, 1/3,
        // mean 5/12. Label shares: N 3/12, P 3/12, A 6/12 -> P_e = 54/144.
        // kappa = (60/144 - 54/144) / (90/144) = 1/15.
        let tasks = vec![vec![A, A, A], vec![A, A, P], vec![A, P, N], vec![N, N, P]];
        let kappa = fleiss_kappa(&tasks).unwrap();
        assert!((kappa - 1.0 / 15.0).abs() < 1e-12, "{kappa}");
    }

    #[test]
    fn perfect_agreement_is_one_and_undefined_cases_say_why() {
        let tasks = vec![vec![A, A], vec![N, N], vec![P, P]];
        assert!((fleiss_kappa(&tasks).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(
            fleiss_kappa(&[vec![A, A], vec![A, A]]),
            Err(AgreementError::OneLabelOnly { label: A })
        );
        assert_eq!(fleiss_kappa(&[]), Err(AgreementError::NoTasks));
        assert_eq!(
            fleiss_kappa(&[vec![A]]),
            Err(AgreementError::TooFewJudges { judges: 1 })
        );
        assert_eq!(
            fleiss_kappa(&[vec![A, N], vec![A, N, P]]),
            Err(AgreementError::UnequalPanels {
                task: 1,
                got: 3,
                expected: 2
            })
        );
    }

    #[test]
    fn krippendorff_alpha_of_a_hand_computed_table() {
        // Two judges, three tasks: (N, N), (A, A), (N, A). Coincidences: o_NN = 2, o_AA = 2,
        // o_NA = o_AN = 1; n_N = n_A = 3, n = 6; d(N, A) = (3 + 0 + 3 - 3)^2 = 9.
        // alpha = 1 - 5 x (2 x 9) / (2 x 3 x 3 x 9) = 1 - 90 / 162 = 4/9.
        let tasks = vec![
            vec![Some(N), Some(N)],
            vec![Some(A), Some(A)],
            vec![Some(N), Some(A)],
        ];
        let alpha = krippendorff_alpha_ordinal(&tasks).unwrap();
        assert!((alpha - 4.0 / 9.0).abs() < 1e-12, "{alpha}");
        // A task with one label adds nothing.
        let mut with_lone = tasks.clone();
        with_lone.push(vec![Some(P), None]);
        assert!((krippendorff_alpha_ordinal(&with_lone).unwrap() - alpha).abs() < 1e-12);
        assert_eq!(
            krippendorff_alpha_ordinal(&[vec![Some(A), None]]),
            Err(AgreementError::NoTasks)
        );
    }

    #[test]
    fn all_agree_and_all_differ_are_counted_on_complete_panels() {
        let counts =
            AgreementCounts::of(&[vec![A, A, A], vec![A, P, N], vec![A, A, N], vec![N, P, A]]);
        assert_eq!(
            counts,
            AgreementCounts {
                tasks: 4,
                all_agree: 1,
                all_differ: 2
            }
        );
        assert_eq!(counts.all_agree_rate(), Some(0.25));
        assert_eq!(counts.all_differ_rate(), Some(0.5));
        assert_eq!(AgreementCounts::of(&[]).all_agree_rate(), None);
    }

    #[test]
    fn each_judges_labels_show_a_lenient_one() {
        let tasks = vec![
            vec![Some(A), Some(N), None],
            vec![Some(A), Some(P), Some(N)],
        ];
        let judges = judge_labels(&tasks, 3);
        assert_eq!(
            judges[0],
            JudgeLabels {
                counts: [0, 0, 2],
                missing: 0
            }
        );
        assert_eq!(judges[1].counts, [1, 1, 0]);
        assert_eq!(
            judges[2],
            JudgeLabels {
                counts: [1, 0, 0],
                missing: 1
            }
        );
    }
}
