//! Splitting a build across machines: `--shard I/N` runs the items of shard I (by a stable hash
//! of the episode, or of the run for run-level stages) and takes every other result from the
//! caches, local or shared, without running it; `--assemble` runs the benchmark-level stages
//! alone (profile balance, questions, export), which need every shard's results. A build that
//! shares a remote cache goes in rounds: the shards, then the assembly, as many times as the
//! DAG has benchmark-level stages between its ends.

use crate::Level;
use crate::hash::ContentHash;

/// Which items a build may run: all, one shard's, or the benchmark-level ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Part {
    #[default]
    All,
    /// Shard `index` of `count` (`--shard index/count`).
    Shard { index: u32, count: u32 },
    /// The benchmark-level items alone (`--assemble`).
    Assemble,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--shard {given:?} is not I/N with 0 <= I < N (shard 3 of 4 is `--shard 2/4`; a Slurm array \
     task passes `--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`)"
)]
pub struct BadShard {
    pub given: String,
}

impl Part {
    /// `I/N`, counted from 0.
    pub fn shard(text: &str) -> Result<Self, BadShard> {
        let bad = || BadShard {
            given: text.to_string(),
        };
        let (index, count) = text.trim().split_once('/').ok_or_else(bad)?;
        let index: u32 = index.trim().parse().map_err(|_| bad())?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        if index >= count {
            return Err(bad());
        }
        Ok(Part::Shard { index, count })
    }

    /// Whether a build of this part runs `item` of a stage at `level` (when it is not reused).
    pub fn runs(&self, level: Level, item: &str) -> bool {
        match *self {
            Part::All => true,
            Part::Assemble => level == Level::Benchmark,
            Part::Shard { index, count } => {
                level != Level::Benchmark && shard_of(level, item, count) == index
            }
        }
    }
}

/// The shard of `item`: by its episode (`show/episode`, the first two segments) at the
/// episode and scenario levels, so an episode's scenarios stay with the episode that
/// introduces them; by the whole id at the run level, so one scenario's runs spread out.
pub fn shard_of(level: Level, item: &str, count: u32) -> u32 {
    let key = match level {
        Level::Run => item,
        _ => {
            let end = item
                .match_indices('/')
                .nth(1)
                .map_or(item.len(), |(at, _)| at);
            &item[..end]
        }
    };
    let hash = ContentHash::of(key.as_bytes());
    let first = u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"));
    (first % u64::from(count)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_read_from_i_of_n_and_anything_else_is_refused() {
        assert_eq!(Part::shard("2/4"), Ok(Part::Shard { index: 2, count: 4 }));
        for bad in ["4/4", "1", "a/2", "-1/2", "1/0", ""] {
            assert!(Part::shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_item_is_in_exactly_one_shard_and_scenarios_go_with_their_episode() {
        let episodes: Vec<String> = (0..40).map(|e| format!("show/e{e}")).collect();
        let mut sizes = [0; 3];
        for episode in &episodes {
            let runners: Vec<u32> = (0..3)
                .filter(|&i| Part::Shard { index: i, count: 3 }.runs(Level::Episode, episode))
                .collect();
            assert_eq!(runners.len(), 1, "{episode}");
            sizes[runners[0] as usize] += 1;
            let scenario = format!("{episode}/sc001");
            assert_eq!(
                shard_of(Level::Scenario, &scenario, 3),
                shard_of(Level::Episode, episode, 3)
            );
        }
        assert!(sizes.iter().all(|&n| n >= 6), "{sizes:?}");
        for part in [
            Part::Shard { index: 0, count: 3 },
            Part::Shard { index: 2, count: 3 },
        ] {
            assert!(!part.runs(Level::Benchmark, "benchmark"));
        }
        assert!(Part::Assemble.runs(Level::Benchmark, "benchmark"));
        assert!(!Part::Assemble.runs(Level::Scenario, "show/e1/sc001"));
    }
}
