//! The task score of a cell of the tables: (2 N_achieved + 0.5 N_partial) / (2 N) x 100, over
//! the tasks the panel labelled; tasks it could not label are counted beside it, never as 0.

use serde::{Deserialize, Serialize};

use crate::label::Label;

/// The labels of a cell's tasks, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub achieved: usize,
    pub partially_achieved: usize,
    pub not_achieved: usize,
    /// Tasks the panel could not label (too few judges answered).
    pub missing: usize,
}

impl Tally {
    /// Counts `labels`, `None` being an unscored task.
    pub fn of(labels: impl IntoIterator<Item = Option<Label>>) -> Tally {
        let mut tally = Tally::default();
        for label in labels {
            tally.add(label);
        }
        tally
    }

    pub fn add(&mut self, label: Option<Label>) {
        match label {
            Some(Label::Achieved) => self.achieved += 1,
            Some(Label::PartiallyAchieved) => self.partially_achieved += 1,
            Some(Label::NotAchieved) => self.not_achieved += 1,
            None => self.missing += 1,
        }
    }

    pub fn merge(&mut self, other: Tally) {
        self.achieved += other.achieved;
        self.partially_achieved += other.partially_achieved;
        self.not_achieved += other.not_achieved;
        self.missing += other.missing;
    }

    /// Labelled tasks: the score's N.
    pub fn scored(&self) -> usize {
        self.achieved + self.partially_achieved + self.not_achieved
    }

    /// The numerator of the score: 2 per achieved task, 0.5 per partial one.
    pub fn points(&self) -> f64 {
        self.achieved as f64 * Label::Achieved.points()
            + self.partially_achieved as f64 * Label::PartiallyAchieved.points()
    }

    /// The score from 0 to 100; `None` when no task of the cell was labelled.
    pub fn score(&self) -> Option<f64> {
        let scored = self.scored();
        (scored > 0).then(|| self.points() / (2.0 * scored as f64) * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::label::Label::{Achieved as A, NotAchieved as N, PartiallyAchieved as P};

    #[test]
    fn the_score_is_the_papers_formula_over_labelled_tasks_only() {
        // 3 achieved, 2 partial, 1 not: (6 + 1) / 12 x 100.
        let tally = Tally::of([Some(A), Some(P), Some(A), Some(N), Some(P), Some(A), None]);
        assert_eq!(
            tally,
            Tally {
                achieved: 3,
                partially_achieved: 2,
                not_achieved: 1,
                missing: 1
            }
        );
        assert_eq!(tally.scored(), 6);
        assert!((tally.score().unwrap() - 700.0 / 12.0).abs() < 1e-12);
        assert_eq!(Tally::of([Some(A), Some(A)]).score(), Some(100.0));
        assert_eq!(Tally::of([Some(P)]).score(), Some(25.0));
        assert_eq!(Tally::of([Some(N)]).score(), Some(0.0));
    }

    #[test]
    fn a_cell_of_unscored_tasks_has_no_score_rather_than_zero() {
        let tally = Tally::of([None, None]);
        assert_eq!(tally.score(), None);
        assert_eq!(tally.missing, 2);
        assert_eq!(Tally::default().score(), None);
    }

    #[test]
    fn merged_tallies_count_both() {
        let mut left = Tally::of([Some(A), None]);
        left.merge(Tally::of([Some(N), Some(P)]));
        assert_eq!(left, Tally::of([Some(A), None, Some(N), Some(P)]));
    }
}
