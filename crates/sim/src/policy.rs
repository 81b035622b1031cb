//! Who speaks next. Every choice is a function of the run's seed and the turns so far, so a run
//! re-played from the request cache takes the same turns, and two runs with one seed are equal.

use serde::{Deserialize, Serialize};

/// A role absent from this many consecutive turns is given the turn ahead of the speaker's
/// suggestion ([`SpeakerPolicy::SuggestedFair`]).
pub const MAX_ABSENT_TURNS: usize = 4;

/// How the next speaker is chosen.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SpeakerPolicy {
    /// The speaker's suggestion is followed, unless a role would otherwise stay silent for more
    /// than [`MAX_ABSENT_TURNS`] turns in a row: then the absent roles go first, the one due
    /// first ahead. "uncertain", the speaker's own name or a name that is no participant's
    /// falls back to round robin.
    #[default]
    SuggestedFair,
    /// Participants in order, the last followed by the first.
    RoundRobin,
    /// Any participant but the speaker, drawn with the run's seed (AgentSense's order).
    RandomNoRepeat,
}

/// The seed of one decision of one run: runs, replicates and turns draw independently.
pub fn decision_seed(run_seed: u64, replicate: u32, turn: usize) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"viss-sim speaker");
    hasher.update(&run_seed.to_le_bytes());
    hasher.update(&replicate.to_le_bytes());
    hasher.update(&(turn as u64).to_le_bytes());
    let bytes = hasher.finalize();
    u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The first speaker of a run of `participants` roles (the paper draws a_1 at random).
pub fn first_speaker(participants: usize, run_seed: u64, replicate: u32) -> usize {
    assert!(participants > 0, "a run has at least one participant");
    fastrand::Rng::with_seed(decision_seed(run_seed, replicate, 0)).usize(0..participants)
}

/// The speaker of the turn after `spoken` (the speakers so far, by participant index, the last
/// being the current speaker), given the current speaker's `suggestion` (a participant index,
/// or `None` for "uncertain" or a name that is no participant's). `present` says, per
/// participant, whether it is still in the scene (a role may leave where action types are on);
/// only those are chosen, and the run has ended before fewer than two remain.
pub fn next_speaker(
    policy: SpeakerPolicy,
    present: &[bool],
    spoken: &[usize],
    suggestion: Option<usize>,
    run_seed: u64,
    replicate: u32,
) -> usize {
    let participants = present.len();
    assert!(participants > 0, "a run has at least one participant");
    let Some(&current) = spoken.last() else {
        return first_speaker(participants, run_seed, replicate);
    };
    // Everyone else still here, in order after the current speaker.
    let others: Vec<usize> = (1..participants)
        .map(|step| (current + step) % participants)
        .filter(|&role| present[role])
        .collect();
    let Some(&round_robin) = others.first() else {
        return current;
    };
    match policy {
        SpeakerPolicy::RoundRobin => round_robin,
        SpeakerPolicy::RandomNoRepeat => {
            let mut rng =
                fastrand::Rng::with_seed(decision_seed(run_seed, replicate, spoken.len()));
            let mut ordered = others.clone();
            ordered.sort_unstable();
            ordered[rng.usize(0..ordered.len())]
        }
        SpeakerPolicy::SuggestedFair => {
            if let Some(overdue) = longest_absent(present, spoken) {
                return overdue;
            }
            match suggestion {
                Some(role) if others.contains(&role) => role,
                _ => round_robin,
            }
        }
    }
}

/// The role that must speak now so that no role stays silent for more than
/// [`MAX_ABSENT_TURNS`] turns in a row, if any must (a role that never spoke counts from the
/// start of the run). Each other role has a last turn by which it has to speak; when the roles
/// due within the next k turns are more than k can serve, the one due first takes this turn
/// (earliest deadline first, which keeps every role within the limit whenever any order can:
/// up to five roles always). Ties go to the first in order.
fn longest_absent(present: &[bool], spoken: &[usize]) -> Option<usize> {
    let current = *spoken.last()?;
    let now = spoken.len();
    let mut due: Vec<(usize, usize)> = (0..present.len())
        .filter(|&role| role != current && present[role])
        .map(|role| {
            let deadline = match spoken.iter().rposition(|&s| s == role) {
                Some(at) => at + MAX_ABSENT_TURNS + 1,
                None => MAX_ABSENT_TURNS,
            };
            (deadline, role)
        })
        .collect();
    due.sort_unstable();
    let forced = due
        .iter()
        .enumerate()
        .any(|(count, &(deadline, _))| deadline <= now + count);
    forced.then(|| due[0].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays `turns` turns where every speaker suggests `suggest(turn, speaker)`.
    fn play(
        policy: SpeakerPolicy,
        participants: usize,
        turns: usize,
        seed: u64,
        suggest: impl Fn(usize, usize) -> Option<usize>,
    ) -> Vec<usize> {
        let mut spoken = vec![first_speaker(participants, seed, 0)];
        while spoken.len() < turns {
            let current = *spoken.last().unwrap();
            let suggestion = suggest(spoken.len(), current);
            spoken.push(next_speaker(
                policy,
                &vec![true; participants],
                &spoken,
                suggestion,
                seed,
                0,
            ));
        }
        spoken
    }

    /// The longest run of consecutive turns some role did not speak in, after its first chance.
    fn longest_absence(participants: usize, spoken: &[usize]) -> usize {
        (0..participants)
            .map(|role| {
                let mut longest = 0;
                let mut since = 0;
                for &speaker in spoken {
                    if speaker == role {
                        since = 0;
                    } else {
                        since += 1;
                        longest = longest.max(since);
                    }
                }
                longest
            })
            .max()
            .unwrap()
    }

    #[test]
    fn no_role_is_left_out_for_more_than_four_turns_whatever_the_suggestions() {
        // Up to five roles the policy can always yield in time, even when every speaker
        // names the same one or two others, and on long runs.
        for participants in 2..=5 {
            for seed in 0..20 {
                let greedy = play(
                    SpeakerPolicy::SuggestedFair,
                    participants,
                    200,
                    seed,
                    |_, s| Some(if s == 0 { 1 } else { 0 }),
                );
                assert!(
                    longest_absence(participants, &greedy) <= MAX_ABSENT_TURNS,
                    "{participants} roles, seed {seed}: {greedy:?}"
                );
                for pair in greedy.windows(2) {
                    assert_ne!(pair[0], pair[1], "nobody speaks twice in a row");
                }
            }
        }
    }

    #[test]
    fn a_suggestion_is_followed_while_nobody_is_overdue() {
        // Three roles, each suggesting the next but one: 0 -> 2 -> 1 -> 0, all of them in turn.
        let spoken = play(SpeakerPolicy::SuggestedFair, 3, 12, 1, |_, s| {
            Some((s + 2) % 3)
        });
        for pair in spoken.windows(2) {
            assert_eq!(pair[1], (pair[0] + 2) % 3, "{spoken:?}");
        }
        // "uncertain", the speaker itself or no participant: round robin.
        for bad in [None, Some(7)] {
            assert_eq!(
                next_speaker(SpeakerPolicy::SuggestedFair, &[true; 3], &[1], bad, 1, 0),
                2
            );
        }
        assert_eq!(
            next_speaker(
                SpeakerPolicy::SuggestedFair,
                &[true; 3],
                &[2],
                Some(2),
                1,
                0
            ),
            0
        );
    }

    #[test]
    fn runs_with_one_seed_take_the_same_turns_and_other_seeds_differ() {
        for policy in [
            SpeakerPolicy::SuggestedFair,
            SpeakerPolicy::RoundRobin,
            SpeakerPolicy::RandomNoRepeat,
        ] {
            let a = play(policy, 4, 40, 9, |t, _| Some(t % 4));
            let b = play(policy, 4, 40, 9, |t, _| Some(t % 4));
            assert_eq!(a, b, "{policy:?}");
        }
        let first: Vec<usize> = (0..32).map(|seed| first_speaker(4, seed, 0)).collect();
        assert!((0..4).all(|role| first.contains(&role)), "{first:?}");
        let random: Vec<Vec<usize>> = (0..5)
            .map(|seed| play(SpeakerPolicy::RandomNoRepeat, 4, 30, seed, |_, _| None))
            .collect();
        assert!(random.windows(2).any(|w| w[0] != w[1]));
        for run in &random {
            assert!(run.windows(2).all(|w| w[0] != w[1]), "no repeat: {run:?}");
        }
        assert_ne!(
            decision_seed(9, 0, 3),
            decision_seed(9, 1, 3),
            "replicates differ"
        );
    }

    #[test]
    fn round_robin_goes_in_order() {
        let spoken = play(SpeakerPolicy::RoundRobin, 3, 7, 4, |_, _| Some(0));
        for pair in spoken.windows(2) {
            assert_eq!(pair[1], (pair[0] + 1) % 3);
        }
    }

    #[test]
    fn a_role_that_left_is_never_chosen_again() {
        let present = [true, false, true, true];
        for policy in [
            SpeakerPolicy::SuggestedFair,
            SpeakerPolicy::RoundRobin,
            SpeakerPolicy::RandomNoRepeat,
        ] {
            let mut spoken = vec![0, 1, 2];
            for _ in 0..30 {
                let next = next_speaker(policy, &present, &spoken, Some(1), 3, 0);
                assert!(
                    next != 1 && next != *spoken.last().unwrap(),
                    "{policy:?}: {next}"
                );
                spoken.push(next);
            }
        }
        // The speaker who just left hands over to the next one still here.
        assert_eq!(
            next_speaker(SpeakerPolicy::RoundRobin, &present, &[1], None, 3, 0),
            2
        );
    }
}
