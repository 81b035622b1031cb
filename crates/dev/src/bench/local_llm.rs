//! The embedded model on this machine: real questions a build asked (recorded with
//! `VISS_RECORD_LOCAL_LLM`, the demo's shipped with this benchmark) put to it again in the order
//! asked, through the code a build uses, each timed; beside them, in the same run, what bounds
//! them here: the memory bandwidth (every generated token reads all the weights), and llama.cpp's
//! own prompt and generation speed with this model (`llama-bench`'s pp512 and tg128).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use viss_llm::local_record::{RecordedQuestion, read_recording};
use viss_llm::{LlmError, LocalBackend, LocalConfig, ReferenceRates};

/// The demo's questions, recorded from a `viss demo` on the default model.
pub const DEMO_RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/bench/reference/local_llm_demo_questions.jsonl"
);

/// One question put to the model again.
#[derive(Debug, Serialize)]
pub struct Replayed {
    pub step: Option<String>,
    pub prompt_tokens: usize,
    /// Of `prompt_tokens`, those whose KV cache an earlier question left.
    pub reused_prompt_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_seconds: f64,
    pub generation_seconds: f64,
    pub wall_seconds: f64,
    /// The answer is the one recorded (greedy questions should give it again).
    pub same_answer: bool,
}

#[derive(Debug, Serialize)]
pub struct LocalLlmBenchReport {
    pub model: String,
    pub threads: usize,
    pub questions: Vec<Replayed>,
    /// Over every question: prompt tokens decoded (not reused) per second of prompt time.
    pub prompt_tokens_per_second: f64,
    /// Over every question: answer tokens per second of generation time.
    pub generation_tokens_per_second: f64,
    pub reused_prompt_tokens: usize,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub wall_seconds: f64,
    pub reference: ReferenceRates,
    /// Reading a buffer much larger than the caches with every thread, GB/s (best of three).
    pub memory_gb_per_second: f64,
    /// `memory_gb_per_second / model bytes`: no generation of one sequence can be faster.
    pub generation_bound_tokens_per_second: f64,
    pub prompt_ratio_to_reference: f64,
    pub generation_ratio_to_reference: f64,
    pub generation_ratio_to_bound: f64,
}

impl LocalLlmBenchReport {
    /// What `viss bench local-llm` prints after the JSON report.
    pub fn summary(&self) -> String {
        let same = self.questions.iter().filter(|q| q.same_answer).count();
        format!(
            "{} questions ({}, {} threads) in {:.1} s: prompt {:.1} tokens/s ({} decoded, {} \
             reused from a kept prefix), {:.3} of llama.cpp's pp{} ({:.1} tokens/s); generation \
             {:.1} tokens/s ({} tokens), {:.3} of llama.cpp's tg{} ({:.1} tokens/s) and {:.3} of \
             the memory bound ({:.1} GB/s / {:.2} GB of weights = {:.1} tokens/s); {} of {} \
             answers the same as recorded",
            self.questions.len(),
            self.model,
            self.threads,
            self.wall_seconds,
            self.prompt_tokens_per_second,
            self.prompt_tokens - self.reused_prompt_tokens,
            self.reused_prompt_tokens,
            self.prompt_ratio_to_reference,
            self.reference.prompt_tokens,
            self.reference.prompt_tokens_per_second,
            self.generation_tokens_per_second,
            self.completion_tokens,
            self.generation_ratio_to_reference,
            self.reference.generated_tokens,
            self.reference.generation_tokens_per_second,
            self.generation_ratio_to_bound,
            self.memory_gb_per_second,
            self.reference.model_bytes as f64 / 1e9,
            self.generation_bound_tokens_per_second,
            same,
            self.questions.len(),
        )
    }
}

/// Puts the first `limit` questions of `recording` to the embedded model as `config` runs it (a
/// build's: [`viss_llm::local_model::local_config`]), after measuring the references.
pub fn run_local_llm_bench(
    config: &LocalConfig,
    recording: &Path,
    limit: usize,
) -> Result<LocalLlmBenchReport, LlmError> {
    let mut questions = read_recording(recording)?;
    questions.truncate(limit);
    if questions.is_empty() {
        return Err(LlmError::Config(format!(
            "{} holds no recorded question",
            recording.display()
        )));
    }
    let backend = LocalBackend::load(config)?;
    // The first measurement maps the weights in; the second is the steady state.
    backend.reference_rates(512, 16)?;
    let reference = backend.reference_rates(512, 128)?;
    let memory_gb_per_second = memory_bandwidth_gb_per_second(reference.threads.max(1));
    let started = Instant::now();
    let replayed = questions
        .iter()
        .map(|question| replay(&backend, question))
        .collect::<Result<Vec<_>, _>>()?;
    let wall_seconds = started.elapsed().as_secs_f64();
    let sum = |f: fn(&Replayed) -> f64| replayed.iter().map(f).sum::<f64>();
    let prompt_tokens: usize = replayed.iter().map(|q| q.prompt_tokens).sum();
    let reused_prompt_tokens: usize = replayed.iter().map(|q| q.reused_prompt_tokens).sum();
    let completion_tokens: usize = replayed.iter().map(|q| q.completion_tokens).sum();
    let prompt_tokens_per_second =
        (prompt_tokens - reused_prompt_tokens) as f64 / sum(|q| q.prompt_seconds).max(1e-9);
    let generation_tokens_per_second =
        completion_tokens as f64 / sum(|q| q.generation_seconds).max(1e-9);
    let generation_bound_tokens_per_second =
        memory_gb_per_second * 1e9 / reference.model_bytes.max(1) as f64;
    Ok(LocalLlmBenchReport {
        model: backend.identity().model,
        threads: reference.threads,
        questions: replayed,
        prompt_tokens_per_second,
        generation_tokens_per_second,
        reused_prompt_tokens,
        prompt_tokens,
        completion_tokens,
        wall_seconds,
        memory_gb_per_second,
        generation_bound_tokens_per_second,
        prompt_ratio_to_reference: prompt_tokens_per_second / reference.prompt_tokens_per_second,
        generation_ratio_to_reference: generation_tokens_per_second
            / reference.generation_tokens_per_second,
        generation_ratio_to_bound: generation_tokens_per_second
            / generation_bound_tokens_per_second,
        reference,
    })
}

fn replay(backend: &LocalBackend, question: &RecordedQuestion) -> Result<Replayed, LlmError> {
    let conversation = question.conversation();
    let started = Instant::now();
    let answer = backend.generate_avoiding(
        &conversation,
        question.schema.as_ref(),
        question.temperature,
        question.seed,
        question.max_tokens,
        &question.avoid_words,
    )?;
    Ok(Replayed {
        step: question.step.clone(),
        prompt_tokens: answer.prompt_tokens,
        reused_prompt_tokens: answer.reused_prompt_tokens,
        completion_tokens: answer.completion_tokens,
        prompt_seconds: answer.prompt_seconds,
        generation_seconds: answer.generation_seconds,
        wall_seconds: started.elapsed().as_secs_f64(),
        same_answer: answer.text == question.answer,
    })
}

/// Sums a 1 GiB buffer of words, split among `threads` threads, three times; the best rate.
fn memory_bandwidth_gb_per_second(threads: usize) -> f64 {
    const WORDS: usize = (1 << 30) / 8;
    let buffer: Vec<u64> = (0..WORDS as u64).collect();
    let chunk = WORDS.div_ceil(threads);
    let mut best = 0.0_f64;
    for _ in 0..3 {
        let started = Instant::now();
        let total: u64 = std::thread::scope(|scope| {
            let sums: Vec<_> = buffer
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().fold(0u64, |a, &b| a.wrapping_add(b))))
                .collect();
            sums.into_iter()
                .map(|sum| sum.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        let seconds = started.elapsed().as_secs_f64();
        // The sum is used, so the reads cannot be optimised away.
        std::hint::black_box(total);
        best = best.max((WORDS * 8) as f64 / seconds / 1e9);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark's questions are whole: every line a question of a demo step, with the
    /// conversation the local model reads and the answer it gave.
    #[test]
    fn the_demo_recording_holds_whole_questions_of_the_demos_steps() {
        let questions = read_recording(Path::new(DEMO_RECORDING)).unwrap();
        assert!(questions.len() >= 40, "{}", questions.len());
        for question in &questions {
            let conversation = question.conversation();
            assert!(conversation.len() >= 2, "{:?}", question.step);
            assert!(question.step.is_some() && question.schema.is_some());
            assert!(question.prompt_tokens > 0 && !question.answer.is_empty());
        }
        // Re-asks are there too: the question again with what was wrong.
        assert!(questions.iter().any(|q| q.messages.len() > 2));
    }
}
