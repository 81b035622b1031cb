//! Okapi BM25 ranking over pre-tokenised documents, score-for-score equal to
//! `rank_bm25.BM25Okapi` (rank_bm25 0.2.2).
//!
//! For a query term `q` and document `D` of `|D|` tokens:
//!
//! ```text
//! idf(q)      = ln(N - n(q) + 0.5) - ln(n(q) + 0.5)
//! score(q, D) = idf(q) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |D| / avgdl))
//! ```
//!
//! where `N` is the number of documents, `n(q)` the number containing `q`,
//! and `tf` the count of `q` in `D`. A term in more than half the documents
//! has a negative idf; like rank_bm25 it is replaced by
//! `epsilon * (mean idf over the vocabulary)`. A query's score is the sum
//! over its tokens, so a term repeated in the query counts once per repeat.
//! Terms absent from the corpus contribute nothing.
//!
//! Worked example (k1 = 1.5, b = 0.75, epsilon = 0.25), three documents of
//! three tokens each, so `avgdl = 3` and the length factor is exactly `k1`:
//!
//! ```text
//! d0 = [tea, is, hot]    d1 = [coffee, is, cold]    d2 = [tea, tea, please]
//! idf(hot) = idf(coffee) = idf(cold) = idf(please) = ln 2.5 - ln 1.5 = L ≈ 0.5108256
//! idf(tea) = idf(is) = ln 1.5 - ln 2.5 = -L  → floored to 0.25 * (4L - 2L) / 6 ≈ 0.0425688
//! score([tea], d2)      = 0.0425688 * 2 * 2.5 / (2 + 1.5) ≈ 0.0608126
//! score([hot, tea], d0) = L * 1 + 0.0425688 * 1          ≈ 0.5533944
//! ```
//!
//! (`hand_computed_three_document_example` checks these numbers.)

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// BM25 settings; defaults are rank_bm25's `BM25Okapi` defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Bm25Params {
    /// Term-frequency saturation: higher lets repeated terms keep adding score.
    pub k1: f64,
    /// Length normalisation: 0 ignores document length, 1 normalises fully.
    pub b: f64,
    /// Negative idfs are replaced by `epsilon * mean idf`.
    pub epsilon: f64,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self {
            k1: 1.5,
            b: 0.75,
            epsilon: 0.25,
        }
    }
}

/// Why an index could not be built or queried.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Bm25Error {
    #[error("the corpus has no documents; index at least one document")]
    EmptyCorpus,
    #[error(
        "every document is empty, so there is no vocabulary or average length; index at least one \
         token"
    )]
    NoTokens,
    #[error("k1 must be a finite number > 0 (got {0}); 1.2 to 2.0 is usual")]
    InvalidK1(f64),
    #[error("b must lie in [0, 1] (got {0}); 0.75 is usual")]
    InvalidB(f64),
    #[error("epsilon must be a finite number (got {0}); 0.25 is usual")]
    InvalidEpsilon(f64),
    #[error("document index {index} is out of range for a corpus of {documents} documents")]
    DocumentOutOfRange { index: usize, documents: usize },
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    document: u32,
    term_frequency: u32,
}

/// An immutable BM25 index over a tokenised corpus.
#[derive(Debug, Clone)]
pub struct Bm25Index {
    params: Bm25Params,
    term_ids: HashMap<String, usize>,
    /// By term id; ids follow first appearance in the corpus, which is also
    /// the order rank_bm25 sums idfs in (that order fixes the rounding of the
    /// mean idf).
    idf: Vec<f64>,
    /// By term id; ascending document order.
    postings: Vec<Vec<Posting>>,
    document_lengths: Vec<usize>,
    /// Per document, `k1 * (1 - b + b * |D| / avgdl)`.
    length_factor: Vec<f64>,
    average_length: f64,
    average_idf: f64,
}

impl Bm25Index {
    /// Indexes `documents`, each already split into tokens (see [`tokenize`]).
    pub fn new(documents: Vec<Vec<String>>, params: Bm25Params) -> Result<Self, Bm25Error> {
        validate_params(&params)?;
        if documents.is_empty() {
            return Err(Bm25Error::EmptyCorpus);
        }

        let mut term_ids: HashMap<String, usize> = HashMap::new();
        let mut postings: Vec<Vec<Posting>> = Vec::new();
        let mut document_lengths = Vec::with_capacity(documents.len());
        for (document, tokens) in documents.into_iter().enumerate() {
            document_lengths.push(tokens.len());
            let document = u32::try_from(document).expect("fewer than 2^32 documents");
            for token in tokens {
                let next_id = postings.len();
                let id = *term_ids.entry(token).or_insert(next_id);
                if id == next_id {
                    postings.push(Vec::new());
                }
                let list = &mut postings[id];
                match list.last_mut() {
                    Some(last) if last.document == document => last.term_frequency += 1,
                    _ => list.push(Posting {
                        document,
                        term_frequency: 1,
                    }),
                }
            }
        }
        if postings.is_empty() {
            return Err(Bm25Error::NoTokens);
        }

        let documents = document_lengths.len();
        let total_tokens: usize = document_lengths.iter().sum();
        let average_length = total_tokens as f64 / documents as f64;

        // rank_bm25 takes the difference of two logs, not the log of the
        // ratio; the two differ in the last bits.
        let mut idf: Vec<f64> = postings
            .iter()
            .map(|list| {
                let containing = list.len();
                ((documents - containing) as f64 + 0.5).ln() - (containing as f64 + 0.5).ln()
            })
            .collect();
        let idf_sum = idf.iter().fold(0.0, |sum, value| sum + value);
        let average_idf = idf_sum / idf.len() as f64;
        let idf_floor = params.epsilon * average_idf;
        for value in &mut idf {
            if *value < 0.0 {
                *value = idf_floor;
            }
        }

        let length_factor = document_lengths
            .iter()
            .map(|&length| {
                params.k1 * ((1.0 - params.b) + params.b * length as f64 / average_length)
            })
            .collect();

        Ok(Self {
            params,
            term_ids,
            idf,
            postings,
            document_lengths,
            length_factor,
            average_length,
            average_idf,
        })
    }

    /// Scores every document against `query`; index `i` is document `i`.
    pub fn score<S: AsRef<str>>(&self, query: &[S]) -> Vec<f64> {
        let mut scores = vec![0.0; self.document_lengths.len()];
        for token in query {
            let Some(&id) = self.term_ids.get(token.as_ref()) else {
                continue;
            };
            for posting in &self.postings[id] {
                let document = posting.document as usize;
                scores[document] += self.term_score(id, posting.term_frequency, document);
            }
        }
        scores
    }

    /// Scores one document; equal bit for bit to `score(query)[document]`.
    pub fn score_doc<S: AsRef<str>>(&self, query: &[S], document: usize) -> Result<f64, Bm25Error> {
        if document >= self.document_lengths.len() {
            return Err(Bm25Error::DocumentOutOfRange {
                index: document,
                documents: self.document_lengths.len(),
            });
        }
        let mut score = 0.0;
        for token in query {
            let Some(&id) = self.term_ids.get(token.as_ref()) else {
                continue;
            };
            let list = &self.postings[id];
            if let Ok(found) = list.binary_search_by_key(&(document as u32), |p| p.document) {
                score += self.term_score(id, list[found].term_frequency, document);
            }
        }
        Ok(score)
    }

    /// Kept to rank_bm25's operation order so results agree to the last bit
    /// on the same libm. A zero term frequency is never scored: it adds 0,
    /// except where rank_bm25 produces 0/0 = NaN (an empty document with
    /// b = 1), which this index reports as 0 instead.
    fn term_score(&self, id: usize, term_frequency: u32, document: usize) -> f64 {
        let tf = f64::from(term_frequency);
        let saturation = tf * (self.params.k1 + 1.0) / (tf + self.length_factor[document]);
        self.idf[id] * saturation
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.document_lengths.len()
    }

    /// Never true for a built index; present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.document_lengths.is_empty()
    }

    /// The idf used for `term` (after the epsilon floor), if it occurs.
    pub fn idf(&self, term: &str) -> Option<f64> {
        self.term_ids.get(term).map(|&id| self.idf[id])
    }

    /// Mean idf over the vocabulary before flooring (rank_bm25's `average_idf`).
    pub fn average_idf(&self) -> f64 {
        self.average_idf
    }

    /// Mean document length in tokens (rank_bm25's `avgdl`).
    pub fn average_document_length(&self) -> f64 {
        self.average_length
    }

    /// The parameters the index was built with.
    pub fn params(&self) -> &Bm25Params {
        &self.params
    }
}

fn validate_params(params: &Bm25Params) -> Result<(), Bm25Error> {
    // k1 = 0 would make absent terms 0/0 in rank_bm25; refusing it keeps
    // every score finite.
    if !(params.k1.is_finite() && params.k1 > 0.0) {
        return Err(Bm25Error::InvalidK1(params.k1));
    }
    if !(0.0..=1.0).contains(&params.b) {
        return Err(Bm25Error::InvalidB(params.b));
    }
    if !params.epsilon.is_finite() {
        return Err(Bm25Error::InvalidEpsilon(params.epsilon));
    }
    Ok(())
}

/// Marks that subtitle and script sources use for an apostrophe: ASCII,
/// typographic right/left quotes, modifier letter, full-width, grave, acute.
fn is_apostrophe(c: char) -> bool {
    matches!(
        c,
        '\'' | '\u{2019}' | '\u{2018}' | '\u{02BC}' | '\u{FF07}' | '`' | '\u{00B4}'
    )
}

/// Splits subtitle or transcript text into lowercase word tokens for
/// [`Bm25Index`].
///
/// - Letters and digits (any script) form words; every other character
///   separates them ("well-known" → `well`, `known`; "3:30" → `3`, `30`).
/// - An apostrophe between two word characters stays, normalised to `'`, so
///   "don't", "don’t" and "DON'T" all give `don't`. Dropping it instead would
///   merge distinct words ("we'll"/"well", "he'll"/"hell", "we're"/"were").
///   Apostrophes at a word edge are quotes or elisions and are dropped
///   ("'cause" → `cause`, "goin'" → `goin`).
/// - No stemming: both sides of a subtitle/transcript match render the same
///   spoken words, and stemming mostly adds accidental overlap between
///   different lines. This was chosen for predictability, not measured.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut pending_apostrophe = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if pending_apostrophe {
                current.push('\'');
                pending_apostrophe = false;
            }
            current.extend(c.to_lowercase());
        } else if is_apostrophe(c) && !current.is_empty() && !pending_apostrophe {
            pending_apostrophe = true;
        } else {
            pending_apostrophe = false;
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Reference {
        corpus: Vec<String>,
        corpus_tokens: Vec<Vec<String>>,
        queries: Vec<String>,
        query_tokens: Vec<Vec<String>>,
        runs: Vec<ReferenceRun>,
    }

    #[derive(Deserialize)]
    struct ReferenceRun {
        params: Bm25Params,
        average_idf: f64,
        scores: Vec<Vec<f64>>,
    }

    /// The generator's tokeniser, `text.lower().split()`, on ASCII text.
    fn whitespace_lowercase(text: &str) -> Vec<String> {
        text.to_lowercase()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    fn tokens(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn matches_rank_bm25_reference_scores() {
        let reference: Reference = serde_json::from_str(include_str!(
            "../../../tests/fixtures/bm25/reference.json"
        ))
        .expect("tests/fixtures/bm25/reference.json parses; regenerate it with make_reference.py");
        let corpus: Vec<Vec<String>> = reference
            .corpus
            .iter()
            .map(|l| whitespace_lowercase(l))
            .collect();
        assert_eq!(corpus, reference.corpus_tokens);
        let queries: Vec<Vec<String>> = reference
            .queries
            .iter()
            .map(|q| whitespace_lowercase(q))
            .collect();
        assert_eq!(queries, reference.query_tokens);

        let mut compared = 0;
        for run in &reference.runs {
            let index = Bm25Index::new(corpus.clone(), run.params).unwrap();
            assert!((index.average_idf() - run.average_idf).abs() < 1e-12);
            for (query, expected) in queries.iter().zip(&run.scores) {
                let scores = index.score(query);
                assert_eq!(scores.len(), expected.len());
                // A tolerance, not equality: the scores are bit-identical when
                // compared in Python, but serde_json's default float parser
                // may land one ulp off when reading the reference back.
                for (document, (ours, theirs)) in scores.iter().zip(expected).enumerate() {
                    assert!(
                        (ours - theirs).abs() < 1e-9,
                        "params {:?}, query {query:?}, doc {document}: {ours} vs rank_bm25 \
                         {theirs}",
                        run.params
                    );
                    assert_eq!(index.score_doc(query, document).unwrap(), *ours);
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 3 * 11 * 12);
    }

    #[test]
    fn hand_computed_three_document_example() {
        let corpus = vec![
            tokens(&["tea", "is", "hot"]),
            tokens(&["coffee", "is", "cold"]),
            tokens(&["tea", "tea", "please"]),
        ];
        let index = Bm25Index::new(corpus, Bm25Params::default()).unwrap();
        let rare_idf = 2.5f64.ln() - 1.5f64.ln();
        // Four terms at +L and two at -L average to L / 3.
        let floor = 0.25 * (rare_idf / 3.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;

        assert!(close(index.average_document_length(), 3.0));
        assert!(close(index.idf("hot").unwrap(), rare_idf));
        assert!(close(index.idf("tea").unwrap(), floor));
        assert!(close(floor, 0.042_568_801_980_499));

        let tea = index.score(&["tea"]);
        assert!(close(tea[0], floor * 1.0 * 2.5 / (1.0 + 1.5)));
        assert_eq!(tea[1], 0.0);
        assert!(close(tea[2], floor * 2.0 * 2.5 / (2.0 + 1.5)));
        assert!(close(tea[2], 0.060_812_574_257_856));

        let hot_tea = index.score(&["hot", "tea"]);
        assert!(close(hot_tea[0], rare_idf + floor));
        assert!(close(hot_tea[0], 0.553_394_425_746_490));
    }

    #[test]
    fn repeated_query_terms_count_each_time_and_unknown_terms_add_nothing() {
        let corpus = vec![
            tokens(&["red", "door"]),
            tokens(&["blue", "door", "door"]),
            tokens(&["green"]),
        ];
        let index = Bm25Index::new(corpus, Bm25Params::default()).unwrap();
        let once = index.score(&["red"]);
        let thrice = index.score(&["red", "red", "red"]);
        assert!((thrice[0] - 3.0 * once[0]).abs() < 1e-12);
        assert_eq!(index.score(&["red", "zebra"]), once);
        assert_eq!(index.score::<&str>(&[]), vec![0.0; 3]);
    }

    #[test]
    fn empty_documents_score_zero_even_with_full_length_normalisation() {
        let corpus = vec![tokens(&["a", "b"]), Vec::new(), tokens(&["b"])];
        let params = Bm25Params {
            b: 1.0,
            ..Bm25Params::default()
        };
        let index = Bm25Index::new(corpus, params).unwrap();
        let scores = index.score(&["a", "b", "nope"]);
        assert_eq!(scores[1], 0.0);
        assert!(scores.iter().all(|s| s.is_finite()));
    }

    #[test]
    fn rejects_bad_corpus_params_and_indices() {
        assert_eq!(
            Bm25Index::new(Vec::new(), Bm25Params::default()).unwrap_err(),
            Bm25Error::EmptyCorpus
        );
        assert_eq!(
            Bm25Index::new(vec![Vec::new(), Vec::new()], Bm25Params::default()).unwrap_err(),
            Bm25Error::NoTokens
        );
        let corpus = || vec![tokens(&["x"])];
        let with = |p: Bm25Params| Bm25Index::new(corpus(), p).unwrap_err();
        let defaults = Bm25Params::default();
        assert_eq!(
            with(Bm25Params {
                k1: 0.0,
                ..defaults
            }),
            Bm25Error::InvalidK1(0.0)
        );
        assert_eq!(
            with(Bm25Params { b: 1.5, ..defaults }),
            Bm25Error::InvalidB(1.5)
        );
        assert!(matches!(
            with(Bm25Params {
                epsilon: f64::INFINITY,
                ..defaults
            }),
            Bm25Error::InvalidEpsilon(_)
        ));
        let index = Bm25Index::new(corpus(), defaults).unwrap();
        assert_eq!(
            index.score_doc(&["x"], 1).unwrap_err(),
            Bm25Error::DocumentOutOfRange {
                index: 1,
                documents: 1
            }
        );
    }

    #[test]
    fn params_deserialize_with_defaults_and_reject_unknown_fields() {
        let params: Bm25Params = serde_json::from_str(r#"{"k1": 1.2, "b": 0.5}"#).unwrap();
        assert_eq!(
            params,
            Bm25Params {
                k1: 1.2,
                b: 0.5,
                epsilon: 0.25
            }
        );
        assert!(serde_json::from_str::<Bm25Params>(r#"{"k": 1.2}"#).is_err());
    }

    #[test]
    fn tokenize_keeps_inner_apostrophes_and_splits_on_everything_else() {
        assert_eq!(
            tokenize("Don't you DARE — I’m fine, we'll see."),
            tokens(&["don't", "you", "dare", "i'm", "fine", "we'll", "see"])
        );
        assert_eq!(
            tokenize("'Cause I was goin' home... O'Brien's well-known 3:30 train!"),
            tokens(&[
                "cause",
                "i",
                "was",
                "goin",
                "home",
                "o'brien's",
                "well",
                "known",
                "3",
                "30",
                "train"
            ])
        );
        assert_eq!(tokenize("rock 'n' roll"), tokens(&["rock", "n", "roll"]));
        assert_eq!(tokenize("it''s"), tokens(&["it", "s"]));
        assert_eq!(tokenize("Ça VA, Zoë?"), tokens(&["ça", "va", "zoë"]));
        assert!(tokenize("  ... -- !? ").is_empty());
        assert!(tokenize("").is_empty());
    }
}
