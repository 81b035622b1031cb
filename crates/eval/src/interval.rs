//! How sure a score is: percentile bootstrap intervals over resampling units (scenarios, so
//! that a scenario's tasks, which share one run, move together), paired comparisons of two
//! models on the same scenarios, and Holm's correction when several pairs are compared. Every
//! draw comes from the seed, so a report is the same each time it is made.

use serde::{Deserialize, Serialize};

/// What one resampling unit adds to a ratio estimate: Σ numerator / Σ denominator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    pub numerator: f64,
    pub denominator: f64,
}

impl Unit {
    /// A unit's share of a task score: its points x 100 over twice its labelled tasks.
    pub fn of_tally(tally: &crate::score::Tally) -> Unit {
        Unit {
            numerator: tally.points() * 100.0,
            denominator: 2.0 * tally.scored() as f64,
        }
    }
}

/// A point estimate with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// The interval's coverage, e.g. 0.95.
    pub level: f64,
    /// Resampling units that carried information (a denominator above zero).
    pub units: usize,
}

/// A paired comparison of two arms on the same units: the difference (first minus second)
/// with its interval, and the two-sided bootstrap p-value of "no difference".
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub difference: Interval,
    pub p_value: f64,
}

/// Bootstrap settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bootstrap {
    pub resamples: usize,
    /// Coverage, strictly between 0 and 1.
    pub level: f64,
    pub seed: u64,
}

impl Bootstrap {
    /// The interval of Σ numerator / Σ denominator over `units`; `None` when no unit has a
    /// denominator (nothing was scored).
    pub fn ratio(&self, units: &[Unit]) -> Option<Interval> {
        let units: Vec<Unit> = units.iter().copied().filter(informative).collect();
        let estimate = ratio(units.iter())?;
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut draws: Vec<f64> = (0..self.resamples)
            .filter_map(|_| ratio((0..units.len()).map(|_| &units[rng.usize(..units.len())])))
            .collect();
        Some(self.interval(estimate, &mut draws, units.len()))
    }

    /// The paired difference of two arms on the same units (`pairs`: per unit, the first arm's
    /// and the second's). Units where either arm has nothing scored are left out.
    pub fn paired_difference(&self, pairs: &[(Unit, Unit)]) -> Option<Comparison> {
        let pairs: Vec<(Unit, Unit)> = pairs
            .iter()
            .copied()
            .filter(|(first, second)| informative(first) && informative(second))
            .collect();
        let difference = |picked: &[&(Unit, Unit)]| -> Option<f64> {
            Some(ratio(picked.iter().map(|p| &p.0))? - ratio(picked.iter().map(|p| &p.1))?)
        };
        let all: Vec<&(Unit, Unit)> = pairs.iter().collect();
        let estimate = difference(&all)?;
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut draws: Vec<f64> = (0..self.resamples)
            .filter_map(|_| {
                let picked: Vec<&(Unit, Unit)> = (0..pairs.len())
                    .map(|_| &pairs[rng.usize(..pairs.len())])
                    .collect();
                difference(&picked)
            })
            .collect();
        let at_or_below = draws.iter().filter(|&&d| d <= 0.0).count();
        let at_or_above = draws.iter().filter(|&&d| d >= 0.0).count();
        // The smallest two-sided level at which the percentile interval would exclude 0, with
        // the draw of the estimate itself counted so that it is never exactly 0.
        let p_value =
            (2.0 * (at_or_below.min(at_or_above) + 1) as f64 / (draws.len() + 1) as f64).min(1.0);
        Some(Comparison {
            difference: self.interval(estimate, &mut draws, pairs.len()),
            p_value,
        })
    }

    fn interval(&self, estimate: f64, draws: &mut [f64], units: usize) -> Interval {
        draws.sort_by(f64::total_cmp);
        let tail = (1.0 - self.level) / 2.0;
        Interval {
            estimate,
            low: quantile(draws, tail).unwrap_or(estimate),
            high: quantile(draws, 1.0 - tail).unwrap_or(estimate),
            level: self.level,
            units,
        }
    }
}

fn informative(unit: &Unit) -> bool {
    unit.denominator > 0.0
}

fn ratio<'a>(units: impl Iterator<Item = &'a Unit>) -> Option<f64> {
    let (numerator, denominator) = units.fold((0.0, 0.0), |(n, d), unit| {
        (n + unit.numerator, d + unit.denominator)
    });
    (denominator > 0.0).then(|| numerator / denominator)
}

/// The `q` quantile of sorted `values`, interpolating linearly between order statistics (as
/// numpy's default does).
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let position = q.clamp(0.0, 1.0) * last as f64;
    let below = position.floor() as usize;
    let above = position.ceil() as usize;
    let fraction = position - below as f64;
    Some(sorted[below] + (sorted[above] - sorted[below]) * fraction)
}

/// Holm's step-down adjustment of `p_values` (in their order): the k-th smallest is multiplied
/// by (m - k + 1), kept at least its predecessor's adjusted value, and capped at 1.
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 0.0f64;
    for (rank, &index) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p_values[index]).min(1.0));
        adjusted[index] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::label::Label::{Achieved as A, NotAchieved as N, PartiallyAchieved as P};
    use crate::score::Tally;

    fn settings(seed: u64) -> Bootstrap {
        Bootstrap {
            resamples: 2000,
            level: 0.95,
            seed,
        }
    }

    fn units(scores: &[(f64, f64)]) -> Vec<Unit> {
        scores
            .iter()
            .map(|&(numerator, denominator)| Unit {
                numerator,
                denominator,
            })
            .collect()
    }

    #[test]
    fn a_tally_unit_reproduces_the_task_score() {
        let tally = Tally::of([Some(A), Some(P), Some(N)]);
        let unit = Unit::of_tally(&tally);
        assert!((unit.numerator / unit.denominator - tally.score().unwrap()).abs() < 1e-12);
    }

    #[test]
    fn the_interval_is_the_same_for_a_seed_and_holds_the_estimate() {
        let data = units(&[
            (200.0, 4.0),
            (50.0, 4.0),
            (400.0, 4.0),
            (0.0, 2.0),
            (100.0, 2.0),
        ]);
        let first = settings(7).ratio(&data).unwrap();
        assert_eq!(first, settings(7).ratio(&data).unwrap());
        assert_ne!(first, settings(8).ratio(&data).unwrap());
        assert_eq!(first.estimate, 750.0 / 16.0);
        assert!(
            first.low < first.estimate && first.estimate < first.high,
            "{first:?}"
        );
        assert!(first.low >= 0.0 && first.high <= 100.0);
        assert_eq!(first.units, 5);
    }

    #[test]
    fn identical_units_give_a_point_interval_and_nothing_scored_gives_none() {
        let same = settings(1).ratio(&units(&[(50.0, 2.0); 6])).unwrap();
        assert_eq!((same.low, same.estimate, same.high), (25.0, 25.0, 25.0));
        assert_eq!(settings(1).ratio(&units(&[(0.0, 0.0)])), None);
        assert_eq!(settings(1).ratio(&[]), None);
        // A unit with nothing scored neither counts nor dilutes.
        let with_empty = settings(1)
            .ratio(&units(&[(50.0, 2.0), (0.0, 0.0)]))
            .unwrap();
        assert_eq!((with_empty.estimate, with_empty.units), (25.0, 1));
    }

    #[test]
    fn a_clear_paired_difference_is_significant_and_none_is_not() {
        let better: Vec<(Unit, Unit)> = (0..30)
            .map(|i| {
                let first = Unit {
                    numerator: 150.0 + (i % 3) as f64 * 10.0,
                    denominator: 2.0,
                };
                let second = Unit {
                    numerator: 40.0 + (i % 5) as f64 * 10.0,
                    denominator: 2.0,
                };
                (first, second)
            })
            .collect();
        let clear = settings(3).paired_difference(&better).unwrap();
        assert!(clear.difference.low > 0.0, "{clear:?}");
        assert!(clear.p_value < 0.01, "{clear:?}");
        let same: Vec<(Unit, Unit)> = better.iter().map(|&(a, _)| (a, a)).collect();
        let none = settings(3).paired_difference(&same).unwrap();
        assert_eq!(none.difference.estimate, 0.0);
        assert_eq!(none.p_value, 1.0);
    }

    #[test]
    fn quantiles_interpolate_as_numpy_does() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&sorted, 0.0), Some(1.0));
        assert_eq!(quantile(&sorted, 0.5), Some(2.5));
        assert!((quantile(&sorted, 0.9).unwrap() - 3.7).abs() < 1e-12);
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn holm_adjusts_by_rank_keeps_order_and_caps_at_one() {
        // Sorted: 0.01 x 4 = 0.04, 0.02 x 3 = 0.06, 0.03 x 2 = 0.06, 0.5 x 1 = 0.5.
        let adjusted = holm(&[0.03, 0.5, 0.01, 0.02]);
        let expected = [0.06, 0.5, 0.04, 0.06];
        for (got, want) in adjusted.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{adjusted:?}");
        }
        // The larger p's own product, 0.04 x 1, is raised to its predecessor's 0.03 x 2.
        let monotone = holm(&[0.03, 0.04]);
        assert!((monotone[0] - 0.06).abs() < 1e-12 && (monotone[1] - 0.06).abs() < 1e-12);
        assert_eq!(holm(&[0.6, 0.7]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }
}
