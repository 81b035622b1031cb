//! What a judge says of one task, and what the panel decides from it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A judge's verdict on one role's task, ordered from worst to best.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum Label {
    #[serde(rename = "Not Achieved")]
    NotAchieved,
    #[serde(rename = "Partially Achieved")]
    PartiallyAchieved,
    #[serde(rename = "Achieved")]
    Achieved,
}

impl Label {
    /// Worst to best; a label's position here is its ordinal rank.
    pub const ALL: [Label; 3] = [
        Label::NotAchieved,
        Label::PartiallyAchieved,
        Label::Achieved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Label::NotAchieved => "Not Achieved",
            Label::PartiallyAchieved => "Partially Achieved",
            Label::Achieved => "Achieved",
        }
    }

    /// The label a judge wrote, ignoring case and surrounding space; `None` for anything else
    /// (a judge's "Mostly achieved" is refused, not rounded to a label).
    pub fn from_name(name: &str) -> Option<Label> {
        let name = name.trim();
        Label::ALL
            .into_iter()
            .find(|label| label.as_str().eq_ignore_ascii_case(name))
    }

    /// 0 (Not Achieved), 1 (Partially Achieved) or 2 (Achieved).
    pub fn rank(self) -> usize {
        self as usize
    }

    /// What the label adds to a task score's numerator, out of 2 (the paper weights a partial
    /// achievement a quarter of a full one).
    pub fn points(self) -> f64 {
        match self {
            Label::NotAchieved => 0.0,
            Label::PartiallyAchieved => 0.5,
            Label::Achieved => 2.0,
        }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a panel decided for one task, and on what grounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum Verdict {
    /// Every judge that answered gave this label.
    Unanimous { label: Label },
    /// More judges gave this label than any other.
    Plurality { label: Label },
    /// No label led (three judges giving three labels, or a tie): Partially Achieved, the
    /// paper's rule for a panel that is all different.
    Split,
    /// Too few judges answered for a vote: the task has no label and is counted as missing.
    Unscored { answered: usize, needed: usize },
}

impl Verdict {
    /// The label the task is scored with; `None` when it is unscored.
    pub fn label(self) -> Option<Label> {
        match self {
            Verdict::Unanimous { label } | Verdict::Plurality { label } => Some(label),
            Verdict::Split => Some(Label::PartiallyAchieved),
            Verdict::Unscored { .. } => None,
        }
    }
}

/// Judges that must answer for a panel of `panel` judges to vote: two, or the one judge of a
/// panel of one. A single answer out of three is one judge's opinion, not the panel's.
pub fn quorum(panel: usize) -> usize {
    panel.min(2)
}

/// The panel's vote on one task from each configured judge's label (`None`: that judge failed
/// or left the task out after its retries).
pub fn vote(labels: &[Option<Label>]) -> Verdict {
    let given: Vec<Label> = labels.iter().flatten().copied().collect();
    let needed = quorum(labels.len());
    if given.len() < needed || given.is_empty() {
        return Verdict::Unscored {
            answered: given.len(),
            needed: needed.max(1),
        };
    }
    let counts = Label::ALL.map(|label| given.iter().filter(|&&g| g == label).count());
    let top = counts.iter().copied().max().unwrap_or(0);
    let leaders: Vec<Label> = Label::ALL
        .into_iter()
        .zip(counts)
        .filter(|&(_, count)| count == top)
        .map(|(label, _)| label)
        .collect();
    match leaders.as_slice() {
        [label] if top == given.len() => Verdict::Unanimous { label: *label },
        [label] => Verdict::Plurality { label: *label },
        _ => Verdict::Split,
    }
}

#[cfg(test)]
mod tests {
    use super::Label::{Achieved as A, NotAchieved as N, PartiallyAchieved as P};
    use super::*;

    #[test]
    fn labels_read_as_the_judges_write_them_and_nothing_else() {
        assert_eq!(Label::from_name(" achieved "), Some(A));
        assert_eq!(Label::from_name("Partially Achieved"), Some(P));
        assert_eq!(Label::from_name("NOT ACHIEVED"), Some(N));
        assert_eq!(Label::from_name("Mostly achieved"), None);
        assert_eq!(Label::from_name(""), None);
        assert_eq!(serde_json::to_string(&P).unwrap(), "\"Partially Achieved\"");
        assert_eq!(
            serde_json::from_str::<Label>("\"Not Achieved\"").unwrap(),
            N
        );
        assert_eq!([N.rank(), P.rank(), A.rank()], [0, 1, 2]);
    }

    #[test]
    fn three_judges_vote_by_majority_and_all_different_is_partial() {
        assert_eq!(
            vote(&[Some(A), Some(A), Some(A)]),
            Verdict::Unanimous { label: A }
        );
        assert_eq!(
            vote(&[Some(A), Some(N), Some(A)]),
            Verdict::Plurality { label: A }
        );
        assert_eq!(
            vote(&[Some(P), Some(N), Some(N)]),
            Verdict::Plurality { label: N }
        );
        assert_eq!(vote(&[Some(A), Some(P), Some(N)]), Verdict::Split);
        assert_eq!(vote(&[Some(A), Some(P), Some(N)]).label(), Some(P));
    }

    #[test]
    fn a_failed_judge_is_left_out_of_the_vote_and_below_quorum_the_task_is_unscored() {
        assert_eq!(
            vote(&[Some(A), None, Some(A)]),
            Verdict::Unanimous { label: A }
        );
        // Two judges that disagree are all different: Partially Achieved.
        assert_eq!(vote(&[Some(A), None, Some(N)]), Verdict::Split);
        let one_of_three = vote(&[None, Some(A), None]);
        assert_eq!(
            one_of_three,
            Verdict::Unscored {
                answered: 1,
                needed: 2
            }
        );
        assert_eq!(one_of_three.label(), None);
        assert_eq!(
            vote(&[None, None, None]),
            Verdict::Unscored {
                answered: 0,
                needed: 2
            }
        );
    }

    #[test]
    fn a_panel_of_one_needs_its_one_judge() {
        assert_eq!(vote(&[Some(N)]), Verdict::Unanimous { label: N });
        assert_eq!(
            vote(&[None]),
            Verdict::Unscored {
                answered: 0,
                needed: 1
            }
        );
        assert_eq!(
            vote(&[]),
            Verdict::Unscored {
                answered: 0,
                needed: 1
            }
        );
    }

    #[test]
    fn larger_panels_take_the_most_given_label_and_a_tie_is_partial() {
        assert_eq!(
            vote(&[Some(A), Some(A), Some(P), Some(N), Some(N), Some(A)]),
            Verdict::Plurality { label: A }
        );
        assert_eq!(vote(&[Some(A), Some(A), Some(N), Some(N)]), Verdict::Split);
        assert_eq!(
            vote(&[Some(A), Some(A), Some(N), Some(N), None]),
            Verdict::Split
        );
    }
}
