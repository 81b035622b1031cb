//! The quality gates of issue #18: checks on the free text of an answer that a schema cannot
//! express and that a small model fails in recognisable ways (the same sentence for every task,
//! the prompt's own example copied, the dialogue pasted into a profile, a clause repeated three
//! times, clothing in a description, a generic risk, a vision label that disagrees with the
//! task), with the text helpers they share: words, content-word sets, their overlap, copied and
//! repeated runs of words. Every word list and threshold is here, each with the reason for it.
//!
//! Like every check in [`super::check`], a gate pushes a message naming the role and field at
//! fault and saying what to write instead: it goes back to the model on a re-ask.

use std::collections::{BTreeSet, HashSet};

use unicode_script::{Script, UnicodeScript};

use super::check::{Problems, contains_word, sentences};
use super::context::{ContextLineKind, ScenarioContext};
use super::vocab::VisualChannel;
use super::words::{marked_words, words};

/// Two fields are near-duplicates when their content words (see [`content_words`]) overlap this
/// much or more (Jaccard: shared words over all words). 0.6 rejects a sentence of ten content
/// words with two words swapped (8/12 = 0.67) or one of five with one swapped (4/6), which say
/// the same thing, and accepts two tasks that share a topic word or two but say different
/// things (a typical pair of distinct tasks of one role overlaps below 0.3).
pub const NEAR_DUPLICATE_OVERLAP: f64 = 0.6;

/// A field copies the prompt when it holds this many consecutive words of the prompt template's
/// own text (instructions and examples) or its schema's descriptions. Six words are a phrase,
/// not a coincidence ("to agree out loud to call the landlord tonight" is nine), while an answer
/// may well share a short phrase with the instructions ("what is at stake").
pub const PROMPT_COPY_WORDS: usize = 6;

/// A field copies the dialogue when it holds this many consecutive words of one dialogue line:
/// longer than for the prompt, since a task or profile may fairly quote a short phrase the
/// character says, but not paste the lines. At 8 the default model failed a description six
/// times in a row for retelling the clause a scene turns on ("carry every box with books written
/// on it", eight words, through every warmer re-ask); ten is a whole line of the demo's.
pub const DIALOGUE_COPY_WORDS: usize = 10;

/// A shorter line is a copy only when the field holds the whole of it (a profile that is one of
/// the character's lines): eight words are a sentence someone said, not a phrase. At six, a
/// background that gave the scene's deadline in the line's own seven words ("the van is due
/// back at six") failed six times in a row: a short line stating a fact has few other wordings.
pub const WHOLE_LINE_COPY_WORDS: usize = 8;

/// A run of this many words that occurs twice in one field repeats it (besides a sentence or a
/// clause of three words or more said twice).
pub const REPEATED_RUN_WORDS: usize = 6;

/// Words that carry no content of their own: left out of the sets whose overlap says whether
/// two fields say the same thing.
#[rustfmt::skip]
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does",
    "each", "either", "every", "for", "from", "had", "has", "have", "he", "her", "here", "hers",
    "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "may", "me", "might", "more", "most", "must", "my", "no", "nor", "not", "of", "off",
    "on", "once", "one", "only", "onto", "or", "other", "others", "our", "out", "over", "own",
    "shall", "she", "should", "so", "some", "than", "that", "the", "their", "theirs", "them",
    "themselves", "then", "there", "these", "they", "this", "those", "to", "too", "under", "up",
    "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "whose", "why", "will", "with", "would", "you", "your",
];

/// Words by which a field speaks as one of the characters. Every free-text field describes the
/// people of the scene from outside, by name; the 1.5B model wrote beliefs and desires as the
/// character's own words ("I want to stay"). Words inside quotes are the character's and stay.
#[rustfmt::skip]
pub const FIRST_PERSON_WORDS: &[&str] = &[
    "i", "i'm", "i've", "i'll", "i'd", "me", "my", "myself",
];

/// Appearance and clothing: the paper's backgrounds and descriptions say nothing of how anyone
/// looks (the prompts say so: "no clothing, hair, body or faces"). Words with a common other
/// sense are left out ("face" the landlord, "suit" each other, wine "glasses", a "short" talk).
#[rustfmt::skip]
pub const APPEARANCE_TERMS: &[&str] = &[
    "wearing", "wears", "wore", "dressed", "clothes", "clothing", "outfit", "shirt", "t-shirt",
    "blouse", "dress", "skirt", "jeans", "trousers", "pants", "jacket", "coat", "sweater", "hoodie",
    "hat", "scarf", "shoes", "boots", "sneakers", "apron", "hair", "haired", "hairstyle", "blonde",
    "blond", "brunette", "redhead", "beard", "bearded", "moustache", "mustache", "makeup",
    "lipstick", "tattoo", "tattoos", "tall", "slim", "skinny", "plump", "muscular", "handsome",
    "beautiful", "pretty", "ugly", "attractive", "eyes", "freckles", "complexion", "appearance",
];

/// Feelings, one of the two kinds of mental state ([`THOUGHT_TERMS`] the other): the paper's
/// backgrounds and descriptions say what happens and what is at stake, not how anyone feels or
/// what they think ("Do not describe feelings or thoughts"). Desires ("wants") stay allowed:
/// they are what is at stake.
#[rustfmt::skip]
pub const FEELING_TERMS: &[&str] = &[
    "feel", "feels", "felt", "feeling", "feelings", "emotion", "emotions", "emotional",
    "emotionally", "angry", "anger", "sad", "sadness", "happy", "happiness", "upset", "worried",
    "worries", "anxious", "anxiety", "nervous", "nervously", "afraid", "scared", "frightened",
    "fear", "fears", "jealous", "jealousy", "annoyed", "irritated", "frustrated", "frustration",
    "embarrassed", "ashamed", "guilty", "lonely", "excited", "furious", "resentful", "resentment",
    "disappointed", "heartbroken", "relieved",
];

/// Thoughts, the other kind of mental state (see [`FEELING_TERMS`]).
pub const THOUGHT_TERMS: &[&str] = &["thinks", "believes", "wonders", "hopes", "regrets"];

/// The verbs by which a belief says how its character feels instead of what it holds true
/// ("Noor feels a sense of shame", "Theo is worried about the deposit").
const FEELING_VERBS: &[&str] = &["feel", "feels", "felt", "is", "was", "gets", "grows"];

/// What makes a risk a concrete social or relational cost, besides naming another participant:
/// relations, the people one has them with, and the social standing or goodwill at stake. A
/// risk with none of these ("The character stands to lose if they do not get it", "Missing the
/// delivery") names no cost between people, which is what the paper's risks are about.
#[rustfmt::skip]
pub const SOCIAL_COST_TERMS: &[&str] = &[
    "trust", "friend", "friends", "friendship", "relationship", "relationships", "respect",
    "reputation", "loyalty", "love", "marriage", "partner", "partnership", "family", "support",
    "standing", "status", "credibility", "dignity", "pride", "blame", "blamed", "shame",
    "humiliation", "humiliated", "embarrassment", "goodwill", "approval", "favour", "favor",
    "apology", "ally", "allies", "confidence", "rift", "falling out", "breakup", "break up",
    "argument", "fight", "feud", "neighbour", "neighbor", "neighbours", "neighbors", "roommate",
    "flatmate", "colleague", "colleagues", "boss", "customer", "customers", "client", "landlord",
    "tenant", "wife", "husband", "girlfriend", "boyfriend", "brother", "sister", "mother", "father",
    "son", "daughter", "parent", "parents", "children", "team", "job", "promotion", "deal", "bond",
    "authority", "face",
];

/// How a risk says there is none: no risk names a cost.
const NO_RISK_OPENINGS: &[&str] = &["no risk", "nothing", "none", "no real risk", "not much"];

/// The words that name each visual channel in an outcome task (the paper's rule is literal: a
/// task is strongly vision-dependent exactly when it names a concrete visual channel). Phrases
/// with a common non-visual sense are left out ("look at the bill", "points to the van", "stands
/// by her decision").
pub fn channel_terms(channel: VisualChannel) -> &'static [&'static str] {
    match channel {
        VisualChannel::Gaze => &[
            "gaze",
            "gazes",
            "eye contact",
            "eyes",
            "glance",
            "glances",
            "glancing",
            "stare",
            "stares",
            "staring",
            "looks away",
            "look away",
            "in the eye",
            "looks up at",
            "look up at",
        ],
        VisualChannel::FacialExpression => &[
            "facial expression",
            "facial expressions",
            "smile",
            "smiles",
            "smiling",
            "frown",
            "frowns",
            "frowning",
            "grin",
            "grins",
            "grinning",
            "scowl",
            "scowls",
            "wince",
            "winces",
            "eyebrow",
            "eyebrows",
            "pout",
            "pouts",
            "on her face",
            "on his face",
            "on their face",
        ],
        VisualChannel::VisibleEmotion => &[
            "visible emotion",
            "visibly",
            "tears",
            "tearful",
            "cry",
            "cries",
            "crying",
            "laugh",
            "laughs",
            "laughing",
            "blush",
            "blushes",
            "blushing",
            "tremble",
            "trembles",
            "trembling",
        ],
        VisualChannel::Posture => &[
            "posture",
            "body orientation",
            "body language",
            "stand up",
            "stands up",
            "sit down",
            "sits down",
            "sit up",
            "sits up",
            "slump",
            "slumps",
            "lean",
            "leans",
            "leaning",
            "arms crossed",
            "crossed arms",
            "crosses her arms",
            "crosses his arms",
            "turn toward",
            "turns toward",
            "turn towards",
            "turns towards",
            "turn away",
            "turns away",
            "turns to face",
            "face each other",
            "faces each other",
            "shoulders",
            "upright",
        ],
        VisualChannel::Gesture => &[
            "gesture",
            "gestures",
            "gesturing",
            "nod",
            "nods",
            "nodding",
            "shrug",
            "shrugs",
            "wave",
            "waves",
            "waving",
            "hug",
            "hugs",
            "hugging",
            "handshake",
            "shake hands",
            "shakes hands",
            "thumbs up",
            "high five",
            "high-five",
        ],
        VisualChannel::Proximity => &[
            "proximity",
            "distance",
            "move closer",
            "moves closer",
            "step closer",
            "steps closer",
            "step back",
            "steps back",
            "step away",
            "steps away",
            "sit next to",
            "sits next to",
            "stand next to",
            "stands next to",
            "closer to",
        ],
    }
}

/// The visual channels `task` names, each with the first of its words found, in
/// [`VisualChannel::ALL`]'s order.
pub fn channels_named(task: &str) -> Vec<(VisualChannel, &'static str)> {
    VisualChannel::ALL
        .iter()
        .filter_map(|channel| {
            channel_terms(*channel)
                .iter()
                .find(|term| contains_word(task, term))
                .map(|term| (*channel, *term))
        })
        .collect()
}

/// The words of the participants' names, which say nothing about what a field is about (every
/// task of a role names it).
pub fn name_words(ctx: &ScenarioContext) -> HashSet<String> {
    ctx.participants.iter().flat_map(|p| words(p)).collect()
}

/// The words of `text` without the words of `names`.
fn words_without(text: &str, names: &HashSet<String>) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| !names.contains(w))
        .collect()
}

/// The content words of `text`: its words without stop words and without `names`.
pub fn content_words(text: &str, names: &HashSet<String>) -> BTreeSet<String> {
    words_without(text, names)
        .into_iter()
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// Shared words over all words; 0 when both are empty.
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// A field whose content words, this many or more, are all among another's says what the other
/// says, whatever it adds: Theo's task was Noor's ("... is curious about the situation and
/// wants to know more about the plant") with a clause added, which took the Jaccard overlap
/// down to 0.36. Fewer words ("wants the deposit back") are too common a core to judge by.
pub const CONTAINED_CONTENT_WORDS: usize = 5;

/// Whether `a` and `b` say the same thing: the same words apart from the names, content words
/// overlapping by [`NEAR_DUPLICATE_OVERLAP`] or more, or one's content words (at least
/// [`CONTAINED_CONTENT_WORDS`]) all in the other's.
pub fn near_duplicate(a: &str, b: &str, names: &HashSet<String>) -> bool {
    let (plain_a, plain_b) = (words_without(a, names), words_without(b, names));
    if !plain_a.is_empty() && plain_a == plain_b {
        return true;
    }
    let (content_a, content_b) = (content_words(a, names), content_words(b, names));
    let (smaller, larger) = if content_a.len() <= content_b.len() {
        (&content_a, &content_b)
    } else {
        (&content_b, &content_a)
    };
    jaccard(&content_a, &content_b) >= NEAR_DUPLICATE_OVERLAP
        || (smaller.len() >= CONTAINED_CONTENT_WORDS && smaller.is_subset(larger))
}

/// The longest run of at least `n` consecutive words of `text` that also occurs in one of
/// `sources`, joined by spaces; `None` when there is none.
pub fn copied_run(text: &[String], sources: &[Vec<String>], n: usize) -> Option<String> {
    if n == 0 || text.len() < n {
        return None;
    }
    let grams: HashSet<&[String]> = sources
        .iter()
        .flat_map(|source| source.windows(n))
        .collect();
    let in_a_source = |run: &[String]| {
        sources
            .iter()
            .any(|source| source.windows(run.len()).any(|w| w == run))
    };
    let mut best: Option<&[String]> = None;
    let mut start = 0;
    while start + n <= text.len() {
        if !grams.contains(&text[start..start + n]) {
            start += 1;
            continue;
        }
        let mut end = start + n;
        while end < text.len() && in_a_source(&text[start..=end]) {
            end += 1;
        }
        if best.is_none_or(|b| b.len() < end - start) {
            best = Some(&text[start..end]);
        }
        start = end;
    }
    best.map(|run| run.join(" "))
}

/// What `text` says twice: a sentence, a clause of three words or more, or a run of
/// [`REPEATED_RUN_WORDS`] words.
pub fn repetition(text: &str) -> Option<String> {
    let mut seen = HashSet::new();
    for sentence in sentences(text) {
        let sentence = words(&sentence);
        if sentence.len() >= 2 && !seen.insert(sentence.clone()) {
            return Some(sentence.join(" "));
        }
    }
    let mut seen = HashSet::new();
    for clause in text.split(['.', ',', ';', ':', '!', '?', '\n']) {
        let clause = words(clause);
        if clause.len() >= 3 && !seen.insert(clause.clone()) {
            return Some(clause.join(" "));
        }
    }
    let all = words(text);
    let mut seen = HashSet::new();
    all.windows(REPEATED_RUN_WORDS)
        .find(|run| !seen.insert(*run))
        .map(|run| run.join(" "))
}

fn prefix(who: Option<&str>) -> String {
    who.map(|w| format!("{w}: ")).unwrap_or_default()
}

/// Reports a field that copies the prompt (a run of [`PROMPT_COPY_WORDS`] words of its text, or
/// the whole of one of its examples apart from the names), a run of [`DIALOGUE_COPY_WORDS`]
/// words of a dialogue line or a whole shorter line ([`WHOLE_LINE_COPY_WORDS`] or more), or that
/// says something twice ([`repetition`]).
pub fn forbid_copies(
    problems: &mut Problems,
    who: Option<&str>,
    field: &str,
    text: &str,
    ctx: &ScenarioContext,
) {
    let at = prefix(who);
    let field_words = words(text);
    let instructions = ctx.instructions.runs();
    if let Some(run) = copied_run(&field_words, instructions, PROMPT_COPY_WORDS) {
        problems.gate(
            "copies_instructions",
            who,
            field,
            format!(
                "{at}{field} copies \"{run}\" from the instructions; write what fits this scene in \
             your own words"
            ),
        );
    } else {
        let plain = words_without(text, &name_words(ctx));
        if plain.len() >= 2 && instructions.contains(&plain) {
            problems.gate(
                "instructions_example",
                who,
                field,
                format!(
                    "{at}{field} is the instructions' example \"{}\"; write what fits this scene \
                 instead",
                    plain.join(" ")
                ),
            );
        }
    }
    let dialogue: Vec<Vec<String>> = ctx
        .lines
        .iter()
        .filter(|line| line.kind == ContextLineKind::Dialogue)
        .map(|line| words(&line.text))
        .collect();
    let whole_line = || {
        dialogue
            .iter()
            .filter(|line| (WHOLE_LINE_COPY_WORDS..DIALOGUE_COPY_WORDS).contains(&line.len()))
            .find_map(|line| copied_run(&field_words, std::slice::from_ref(line), line.len()))
    };
    if let Some(run) = copied_run(&field_words, &dialogue, DIALOGUE_COPY_WORDS).or_else(whole_line)
    {
        problems.gate(
            "copies_dialogue",
            who,
            field,
            format!(
                "{at}{field} copies the dialogue (\"{run}\"); say what it means for this field in \
             your own words instead of quoting the lines"
            ),
        );
    }
    if let Some(repeated) = repetition(text) {
        problems.gate(
            "repetition",
            who,
            field,
            format!("{at}{field} says \"{repeated}\" more than once; say each thing once"),
        );
    }
}

/// Reports appearance, clothing and mental-state words ([`APPEARANCE_TERMS`],
/// [`FEELING_TERMS`], [`THOUGHT_TERMS`]) in a background or description.
pub fn forbid_looks_and_mental_states(problems: &mut Problems, field: &str, text: &str) {
    let found = |terms: &[&'static str]| -> Vec<&'static str> {
        terms
            .iter()
            .copied()
            .filter(|term| contains_word(text, term))
            .collect()
    };
    let looks = found(APPEARANCE_TERMS);
    if !looks.is_empty() {
        problems.gate(
            "looks_or_clothing",
            None,
            field,
            format!(
                "{field} describes looks or clothing ({}); leave appearance out and say where the \
             scene happens, who is there and what is at stake",
                looks.join(", ")
            ),
        );
    }
    let mut minds = found(FEELING_TERMS);
    minds.extend(found(THOUGHT_TERMS));
    if !minds.is_empty() {
        problems.gate("feelings_or_thoughts", None, field, format!(
            "{field} describes feelings or thoughts ({}); say what happens and what is at stake \
             instead, not how anyone feels or what they think",
            minds.join(", ")
        ));
    }
}

/// The gates every free-text field of every step passes: no copies ([`forbid_copies`]), no
/// letters of a foreign script ([`forbid_foreign_letters`]), no first person
/// ([`forbid_first_person`]).
pub fn gate_free_text(
    problems: &mut Problems,
    who: Option<&str>,
    field: &str,
    text: &str,
    ctx: &ScenarioContext,
) {
    forbid_copies(problems, who, field, text, ctx);
    forbid_foreign_letters(problems, who, field, text, ctx);
    forbid_first_person(problems, who, field, text);
    forbid_open_quotes(problems, who, field, text);
    forbid_glued_words(problems, who, field, text);
    if let Some(who) = who {
        forbid_self_address(problems, who, field, text, ctx);
        forbid_self_address_in_lists(problems, who, field, text, ctx);
    }
}

/// Reports a quote opened and never closed: an odd number of straight double quotes, or curly
/// ones that do not pair (the 1.5B model: `Theo's expression task opening 'Fine.` and a `"` it
/// never closes, which reads as the field cut off).
pub fn forbid_open_quotes(problems: &mut Problems, who: Option<&str>, field: &str, text: &str) {
    let count = |c: char| text.chars().filter(|&x| x == c).count();
    let straight = count('"') % 2 == 1;
    let curly = count('\u{201c}') != count('\u{201d}');
    if straight || curly {
        problems.gate("open_quote", who, field, format!(
            "{}{field} opens a quotation mark it never closes; close it, or write without quotes",
            prefix(who)
        ));
    }
}

/// Reports two words glued at a full stop ("rental.office", "van.The"): a sentence end or a
/// space the model dropped. Abbreviations ("e.g.", "a.m.", "U.S."), numbers ("3.5") and web
/// addresses are not it.
pub fn forbid_glued_words(problems: &mut Problems, who: Option<&str>, field: &str, text: &str) {
    let glued: Vec<&str> = text
        .split_whitespace()
        .filter(|token| {
            let token = token.trim_matches(|c: char| !c.is_alphanumeric());
            if token.contains("://")
                || token.contains('@')
                || token.starts_with("www.")
                || token.chars().any(|c| c.is_ascii_digit())
            {
                return false;
            }
            let pieces: Vec<&str> = token.split('.').collect();
            pieces.len() > 1
                && pieces
                    .windows(2)
                    .any(|pair| pair[0].chars().count() >= 2 && pair[1].chars().count() >= 2)
        })
        .collect();
    if !glued.is_empty() {
        problems.gate(
            "glued_words",
            who,
            field,
            format!(
                "{}{field} glues words together at a full stop ({}); put a space after each full \
             stop",
                prefix(who),
                glued.join(", ")
            ),
        );
    }
}

/// Reports `who` among the people `who` asks, tells, pays ... in a list of names ("Rachel
/// tells Ross and Rachel the truth" in Rachel's field): [`forbid_self_address`] catches the
/// name right after the verb, this the name further down the list.
pub fn forbid_self_address_in_lists(
    problems: &mut Problems,
    who: &str,
    field: &str,
    text: &str,
    ctx: &ScenarioContext,
) {
    let marked = marked_words(text);
    let plain: Vec<String> = marked.iter().map(|(word, _)| word.clone()).collect();
    let mentions = ctx.mentions(&plain);
    // The first word of each mention, by its last.
    let first_word = |end: usize, name: &str| {
        let name_words = words(name);
        (0..=end)
            .rev()
            .take_while(|i| name_words.contains(&plain[*i]))
            .last()
            .unwrap_or(end)
    };
    for (position, &(end, name)) in mentions.iter().enumerate() {
        if name != who || marked[end].1 {
            continue;
        }
        // Walk back over the list: other names, and the words joining them.
        let mut at = first_word(end, name);
        let mut others = 0;
        let mut before = position;
        loop {
            if at > 0 && ["and", "or"].contains(&plain[at - 1].as_str()) {
                at -= 1;
                continue;
            }
            match before.checked_sub(1).map(|b| mentions[b]) {
                Some((other_end, other)) if other_end + 1 == at && other != who => {
                    at = first_word(other_end, other);
                    others += 1;
                    before -= 1;
                }
                _ => break,
            }
        }
        let Some(verb) = at.checked_sub(1).map(|v| plain[v].as_str()) else {
            continue;
        };
        let doer = mentions[..before]
            .iter()
            .rev()
            .find(|(e, _)| *e < at)
            .map(|(_, n)| *n);
        if others > 0 && ADDRESS_VERBS.contains(&verb) && doer == Some(who) {
            problems.gate(
                "self_in_list",
                Some(who),
                field,
                format!(
                    "{who}: {field} lists {who} among the people {who} turns to (\"{verb} ... \
                 {who}\"); name only the others"
                ),
            );
            return;
        }
    }
}

/// Verbs whose object is the person spoken to, moved or paid.
#[rustfmt::skip]
const ADDRESS_VERBS: &[&str] = &[
    "ask", "asks", "asked", "asking", "tell", "tells", "told", "telling", "convince",
    "convinces", "convinced", "convincing", "persuade", "persuades", "persuaded", "persuading",
    "urge", "urges", "urged", "urging", "remind", "reminds", "reminded", "reminding", "warn",
    "warns", "warned", "warning", "help", "helps", "helped", "helping", "show", "shows",
    "showed", "showing", "pay", "pays", "paid", "paying",
];

/// Reports a field of `who` in which `who` asks, tells, helps ... `who`: the participant named
/// right after such a verb is `who`, and so is the one named before it, who does it (the 1.5B
/// model: "Theo will ask Dennis if he has hit anything and will ask Theo if ...", "If Noor
/// fails to tell Noor and Theo the truth"). "Noor asks Noor's brother" is not it.
pub fn forbid_self_address(
    problems: &mut Problems,
    who: &str,
    field: &str,
    text: &str,
    ctx: &ScenarioContext,
) {
    let marked = marked_words(text);
    let plain: Vec<String> = marked.iter().map(|(word, _)| word.clone()).collect();
    let mentions = ctx.mentions(&plain);
    let addressed = mentions.windows(2).find_map(|pair| {
        let [(_, doer), (at, object)] = pair else {
            return None;
        };
        // The word before the name's first word (a mention ends at the name's last).
        let name_words = words(object);
        let start = (0..=*at)
            .rev()
            .take_while(|i| name_words.contains(&plain[*i]))
            .last()?;
        let verb = plain[..start].last()?;
        let possessive = marked[*at].1;
        (*doer == who && *object == who && !possessive && ADDRESS_VERBS.contains(&verb.as_str()))
            .then_some(verb)
    });
    if let Some(verb) = addressed {
        problems.gate(
            "self_address",
            Some(who),
            field,
            format!(
                "{who}: {field} has {who} speaking to or acting on {who} (\"{verb} {who}\"); name \
             the other participant {who} turns to, or say it without naming {who} twice"
            ),
        );
    }
}

/// Reports letters of a script that is neither Latin (the language the prompts are written in)
/// nor one the scene itself is written in (its heading, names and lines): the 1.5B model drops
/// single Chinese characters ("吵", "建") into English fields. A show in another script keeps
/// its own letters.
pub fn forbid_foreign_letters(
    problems: &mut Problems,
    who: Option<&str>,
    field: &str,
    text: &str,
    ctx: &ScenarioContext,
) {
    let mut scene_scripts: HashSet<Script> =
        [Script::Latin, Script::Common, Script::Inherited].into();
    let scene_text = ctx
        .heading
        .iter()
        .chain(&ctx.participants)
        .chain(ctx.lines.iter().flat_map(|line| {
            std::iter::once(&line.text)
                .chain(&line.speaker)
                .chain(&line.directions)
        }));
    for piece in scene_text {
        scene_scripts.extend(
            piece
                .chars()
                .filter(|c| c.is_alphabetic())
                .map(|c| c.script()),
        );
    }
    let mut foreign: Vec<char> = Vec::new();
    for c in text.chars() {
        if c.is_alphabetic() && !scene_scripts.contains(&c.script()) && !foreign.contains(&c) {
            foreign.push(c);
        }
    }
    if !foreign.is_empty() {
        let shown: String = foreign.iter().take(8).collect();
        problems.gate("foreign_letters", who, field, format!(
            "{}{field} has letters of a script the scene is not written in (\"{shown}\"); write \
             it in the scene's language only",
            prefix(who)
        ));
    }
}

/// Reports a belief that says how its own character feels rather than what it holds true: the
/// character (by a word of its name, or a pronoun opening the belief) with a feeling verb and
/// a [`FEELING_TERMS`] word, or a belief that opens with "feels". What a character believes
/// of another's feelings ("Noor thinks Theo is upset") is a belief and stays.
pub fn forbid_feeling_as_belief(problems: &mut Problems, who: &str, text: &str) {
    let tokens = words(text);
    let own: HashSet<String> = words(who).into_iter().collect();
    let is_subject = |index: usize| {
        own.contains(&tokens[index])
            || (index == 0 && ["he", "she", "they"].contains(&tokens[0].as_str()))
    };
    let feeling = |word: &String| FEELING_TERMS.contains(&word.as_str());
    let opens_with_feeling = tokens.first().is_some_and(|w| w.starts_with("feel"));
    let stated = (0..tokens.len().saturating_sub(2)).find(|&i| {
        is_subject(i)
            && FEELING_VERBS.contains(&tokens[i + 1].as_str())
            && (tokens[i + 1].starts_with("feel") || feeling(&tokens[i + 2]))
    });
    let shown = match stated {
        Some(i) => tokens[i..(i + 3).min(tokens.len())].join(" "),
        None if opens_with_feeling => tokens.iter().take(3).cloned().collect::<Vec<_>>().join(" "),
        None => return,
    };
    problems.gate("feeling_as_belief", Some(who), "belief", format!(
        "{who}: belief says how {who} feels (\"{shown}\"), not what {who} holds true; write what \
         {who} takes to be true about the situation or the others"
    ));
}

/// The annotation's own names for what its fields describe. A task or belief that says "Noor's
/// expression style is honest_signaling" or "a clear indication of their conflict
/// characteristic" talks about the annotation instead of the scene (the 1.5B model wrote both
/// as tasks); a label with an underscore is caught as such.
#[rustfmt::skip]
pub const ANNOTATION_TERMS: &[&str] = &[
    "expression style", "conflict characteristic", "conflict mode", "expression task",
    "characteristic task", "regulation task", "outcome task", "interaction regulation",
    "interaction outcome",
    // What the model was given, cited as if the scene were made of it (the 1.5B model: "Mila does
    // not steer the conversation, as the instruction does not provide any information").
    "the instruction does", "the instructions do", "as the instruction", "as the instructions",
    "the prompt", "as the profile",
];

/// Reports a field that names [`ANNOTATION_TERMS`] or a label written with an underscore.
pub fn forbid_annotation_terms(problems: &mut Problems, who: &str, field: &str, text: &str) {
    let mut found: Vec<String> = ANNOTATION_TERMS
        .iter()
        .filter(|term| contains_word(text, term))
        .map(|term| term.to_string())
        .collect();
    found.extend(
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|word| word.trim_matches('_').contains('_'))
            .map(str::to_string),
    );
    if !found.is_empty() {
        problems.gate(
            "annotation_terms",
            Some(who),
            field,
            format!(
                "{who}: {field} talks about the annotation ({}); say what {who} does, wants or \
             holds true in the scene, in plain words",
                found.join(", ")
            ),
        );
    }
}

/// Reports a field written in the first person ([`FIRST_PERSON_WORDS`] outside quotes).
pub fn forbid_first_person(problems: &mut Problems, who: Option<&str>, field: &str, text: &str) {
    let plain = outside_quotes(&text.replace('\u{2019}', "'"));
    let found: BTreeSet<String> = words(&plain)
        .into_iter()
        .filter(|word| FIRST_PERSON_WORDS.contains(&word.as_str()))
        .collect();
    if !found.is_empty() {
        let subject = who.map_or("each character".to_string(), |w| w.to_string());
        problems.gate(
            "first_person",
            who,
            field,
            format!(
                "{}{field} speaks in the first person ({}); write about {subject} from outside, by \
             name or as he, she or they",
                prefix(who),
                found.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
}

/// `text` without what stands in quotes: double quotes (straight or curly) and single quotes
/// that open a word and close one (an apostrophe inside a word is neither).
fn outside_quotes(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut closer: Option<char> = None;
    for (i, &c) in chars.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| chars[j]);
        let after = chars.get(i + 1).copied();
        match closer {
            Some(close) => {
                let closes_here = c == close
                    && (close == '"'
                        || close == '\u{201d}'
                        || !after.is_some_and(char::is_alphanumeric));
                if closes_here {
                    closer = None;
                }
            }
            None => {
                let opens_word = !before.is_some_and(char::is_alphanumeric);
                closer = match c {
                    '"' => Some('"'),
                    '\u{201c}' => Some('\u{201d}'),
                    '\'' if opens_word => Some('\''),
                    '\u{2018}' => Some('\u{2019}'),
                    _ => None,
                };
                if closer.is_none() {
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
        }
    }
    out
}

/// Reports each sentence of `text` that says nearly the same ([`near_duplicate`]) as a sentence
/// of `earlier`, another field the model was shown or wrote first: the 1.5B model's
/// descriptions restated the background. `instead` says what the field should hold.
pub fn forbid_restating(
    problems: &mut Problems,
    field: &str,
    text: &str,
    earlier_field: &str,
    earlier: &str,
    ctx: &ScenarioContext,
    instead: &str,
) {
    let names = name_words(ctx);
    let earlier_sentences = sentences(earlier);
    let restated = sentences(text).into_iter().find(|sentence| {
        earlier_sentences
            .iter()
            .any(|before| near_duplicate(before, sentence, &names))
    });
    if let Some(sentence) = restated {
        problems.gate(
            "restates_earlier_field",
            None,
            field,
            format!("{field} restates the {earlier_field} (\"{sentence}\"); {instead}"),
        );
    }
}

/// One free-text field of an answer, for the checks that compare fields.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub who: &'a str,
    pub name: &'a str,
    pub text: &'a str,
}

/// Which fields of the other roles a field must differ from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherRoles {
    /// Only the same field: one role's desire may be about what another believes (the deposit
    /// Bruno believes he keeps is the deposit Noor wants back), but not be another's desire.
    SameField,
    /// Every field: a role's task is none of the other roles' tasks.
    EveryField,
}

/// Reports each field of `fields` that says nearly the same as an earlier one
/// ([`near_duplicate`]) of its own role or, as `other_roles` says, of another; once per field.
/// A repeat across roles is reported on both roles, each told the other's sentence: asked one
/// role at a time, either may be the one asked to write again. `instead` says what a field
/// should hold.
pub fn forbid_near_duplicates(
    problems: &mut Problems,
    fields: &[Field<'_>],
    other_roles: OtherRoles,
    ctx: &ScenarioContext,
    instead: impl Fn(&Field<'_>) -> String,
) {
    let names = name_words(ctx);
    // A role asked on its own never saw the other role's entry: quoted, it knows what to steer
    // clear of (unquoted, the 1.5B model wrote Bruno's sentence for Theo through five re-asks
    // and failed the demo's item).
    let report = |problems: &mut Problems, field: &Field<'_>, other: &Field<'_>| {
        let whose = if other.who == field.who {
            format!("its {}", other.name)
        } else {
            format!("{}'s {} (\"{}\")", other.who, other.name, other.text.trim())
        };
        problems.gate(
            "near_duplicate",
            Some(field.who),
            field.name,
            format!(
                "{}: {} says nearly the same as {whose}; {}",
                field.who,
                field.name,
                instead(field)
            ),
        );
    };
    let mut reported_earlier: HashSet<(&str, &str)> = HashSet::new();
    for (index, field) in fields.iter().enumerate() {
        if field.text.trim().is_empty() {
            continue;
        }
        let compared = |e: &&Field<'_>| {
            e.who == field.who || other_roles == OtherRoles::EveryField || e.name == field.name
        };
        let earlier = fields[..index]
            .iter()
            .filter(compared)
            .find(|e| !e.text.trim().is_empty() && near_duplicate(e.text, field.text, &names));
        if let Some(earlier) = earlier {
            report(problems, field, earlier);
            if earlier.who != field.who && reported_earlier.insert((earlier.who, earlier.name)) {
                report(problems, earlier, field);
            }
        }
    }
}

/// Reports a `risk_if_failed` that names no concrete social or relational cost: it must name
/// another participant or a [`SOCIAL_COST_TERMS`] word, and not say there is no risk.
pub fn require_social_cost(problems: &mut Problems, who: &str, text: &str, ctx: &ScenarioContext) {
    let lower = text.trim().to_lowercase();
    let others: Vec<&str> = ctx
        .participants
        .iter()
        .map(String::as_str)
        .filter(|p| *p != who)
        .collect();
    let says_none = NO_RISK_OPENINGS.iter().any(|o| lower.starts_with(o));
    let names_other = others
        .iter()
        .any(|other| super::check::mentions(text, other));
    let social = SOCIAL_COST_TERMS
        .iter()
        .any(|term| contains_word(text, term));
    if says_none || !(names_other || social) {
        let whom = if others.is_empty() {
            "someone".to_string()
        } else {
            others.join(" or ")
        };
        problems.gate(
            "no_social_cost",
            Some(who),
            "risk_if_failed",
            format!(
                "{who}: risk_if_failed names no concrete social cost; say what {who} loses between \
             people in this scene if it fails, e.g. {whom}'s trust, a friendship, standing or a \
             job"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::words::Instructions;
    use crate::stages::fixture;

    fn names() -> HashSet<String> {
        name_words(&fixture::context())
    }

    #[test]
    fn words_drop_possessives_and_punctuation() {
        assert_eq!(
            words("Ross's plan: don't tell Monica!"),
            ["ross", "plan", "don't", "tell", "monica"]
        );
    }

    #[test]
    fn near_duplicates_ignore_names_and_stop_words() {
        let n = names();
        assert!(near_duplicate(
            "Ross keeps his answers short.",
            "Ross keeps the answers brief and short.",
            &n
        ));
        assert!(near_duplicate(
            "Ross gets Rachel to set a time.",
            "Rachel gets Ross to set a time.",
            &n
        ));
        assert!(!near_duplicate(
            "Ross states plainly that he is tired of keeping the secret.",
            "Ross insists that the secret be told tonight and does not back down.",
            &n
        ));
        assert!(!near_duplicate("Ross waits.", "Rachel leaves.", &n));
        // The demo export's padded copy: all of one task's content words in the other.
        assert!(near_duplicate(
            "Ross is curious about the situation and wants to know more about the plant.",
            "Rachel is curious about the situation and wants to know more about the plant, \
             which leads her to ask Dennis if he has hit anything.",
            &n
        ));
        // A short common core is no copy.
        assert!(!near_duplicate(
            "Ross wants the deposit back.",
            "Rachel wants the deposit back before the van is returned tonight.",
            &n
        ));
    }

    #[test]
    fn copied_runs_are_found_longest_first() {
        let source = vec![words("gets to agree out loud to call the landlord tonight")];
        let text = words("Theo gets Theo to agree out loud to call the landlord tonight.");
        assert_eq!(
            copied_run(&text, &source, 6).as_deref(),
            Some("to agree out loud to call the landlord tonight")
        );
        assert_eq!(copied_run(&words("to agree out loud"), &source, 6), None);
    }

    #[test]
    fn repetitions_of_sentences_clauses_and_runs_are_found() {
        assert_eq!(
            repetition("Ross asks. Rachel waits. Ross asks.").as_deref(),
            Some("ross asks")
        );
        assert!(
            repetition(
                "Noor and Theo sit in the van, Noor and Theo sit in the van, Noor and Theo sit \
                 in the van."
            )
            .is_some()
        );
        assert_eq!(repetition("Ross asks Rachel. Rachel refuses."), None);
    }

    #[test]
    fn instructions_keep_literal_text_and_split_examples_at_placeholders() {
        let template = "{# a comment with many many many words in it #}\n[user]\n\
            Good: \"<name> gets <other name> to agree out loud to call the landlord tonight.\"\n\
            Bad: \"<name> feels better.\" (not observable)\n\
            - task{{ \", following their expression style\" if profiles else \"\" }}.\n\
            {% for x in y %}{{ x }}{% endfor %}";
        let schema = serde_json::json!({"properties": {"a": {"description": "What the \
            character stands to lose."}}});
        let instructions = Instructions::from_prompt(template, &schema);
        let runs = instructions.runs();
        assert!(runs.contains(&words("to agree out loud to call the landlord tonight")));
        assert!(runs.contains(&words("feels better")));
        assert!(runs.contains(&words(", following their expression style")));
        assert!(runs.contains(&words("What the character stands to lose.")));
        assert!(!runs.iter().any(|r| r.contains(&"comment".to_string())));
        assert!(!runs.iter().any(|r| r.contains(&"endfor".to_string())));
    }

    fn problems_of(check: impl FnOnce(&mut Problems)) -> String {
        let mut problems = Problems::new();
        check(&mut problems);
        problems
            .finish()
            .err()
            .map(|rejection| rejection.message())
            .unwrap_or_default()
    }

    /// A user's prompt in the style of the project's first prompts, which carried the examples
    /// a small model copied (the default prompts no longer carry any).
    const PROMPT_WITH_EXAMPLES: &str = "[user]\n{{ participants | join(\", \") }}\n\
        interaction_outcome_task: a result reached through another participant, e.g. \
        {{ participants[0] }} gets Ross to agree out loud to call the landlord tonight. \
        A bad example: \"{{ participants[1] }} feels better.\"\n";

    #[test]
    fn copies_of_the_prompt_and_the_dialogue_are_rejected_naming_the_field() {
        let mut ctx = fixture::context();
        ctx.instructions = Instructions::from_prompt(
            PROMPT_WITH_EXAMPLES,
            &crate::stages::tasks::answer::schema(),
        );
        let error = problems_of(|p| {
            forbid_copies(
                p,
                Some("Ross"),
                "interaction_outcome_task",
                "Ross gets Ross to agree out loud to call the landlord tonight",
                &ctx,
            )
        });
        assert!(
            error.contains(
                "Ross: interaction_outcome_task copies \"gets ross to agree out loud to call the \
                 landlord tonight\" from the instructions"
            ),
            "{error}"
        );
        let error = problems_of(|p| {
            forbid_copies(
                p,
                Some("Rachel"),
                "interaction_outcome_task",
                "Rachel feels better.",
                &ctx,
            )
        });
        assert!(
            error.contains("Rachel: interaction_outcome_task is the instructions' example"),
            "{error}"
        );
        let error = problems_of(|p| {
            forbid_copies(
                p,
                Some("Ross"),
                "profile",
                "Ross reminds Rachel that everybody knows but Monica: it's your secret, not mine.",
                &ctx,
            )
        });
        assert!(error.is_empty(), "short quotes are fine: {error}");
        // A line under eight words may be restated whole: it is a fact with few other wordings.
        let error = problems_of(|p| {
            forbid_copies(
                p,
                Some("Ross"),
                "profile",
                "Ross says Joey already knows. Everybody knows but Monica.",
                &ctx,
            )
        });
        assert!(error.is_empty(), "a seven-word line: {error}");
        // A whole line of eight words or more is pasted, not quoted, though shorter than the run.
        let error = problems_of(|p| {
            forbid_copies(
                p,
                Some("Ross"),
                "profile",
                "Ross keeps saying you said you'd tell her before the party.",
                &ctx,
            )
        });
        assert!(
            error.contains(
                "Ross: profile copies the dialogue (\"you said you'd tell her before the party\")"
            ),
            "{error}"
        );
        let good = problems_of(|p| {
            forbid_copies(
                p,
                Some("Ross"),
                "interaction_outcome_task",
                "Ross gets Rachel to promise out loud that she will tell the secret tonight.",
                &ctx,
            )
        });
        assert!(good.is_empty(), "{good}");
    }

    #[test]
    fn letters_of_a_script_the_scene_is_not_written_in_are_named() {
        let ctx = fixture::context();
        let error = problems_of(|p| {
            gate_free_text(
                p,
                Some("Ross"),
                "belief",
                "Rachel will 吵 about the party 建 and 吵 again.",
                &ctx,
            )
        });
        assert!(
            error.contains(
                "Ross: belief has letters of a script the scene is not written in (\"吵建\")"
            ),
            "{error}"
        );
        let accented = problems_of(|p| {
            forbid_foreign_letters(p, None, "background", "Rachel's café shuts at nine.", &ctx)
        });
        assert!(accented.is_empty(), "{accented}");
        // A scene written in another script keeps its letters.
        let mut cyrillic = fixture::context();
        cyrillic.lines[1].text = "Ты обещала сказать ей до вечеринки.".to_string();
        let own = problems_of(|p| {
            forbid_foreign_letters(
                p,
                None,
                "background",
                "Ross says «обещала» twice.",
                &cyrillic,
            )
        });
        assert!(own.is_empty(), "{own}");
    }

    #[test]
    fn first_person_outside_quotes_is_named() {
        let error = problems_of(|p| {
            forbid_first_person(p, Some("Rachel"), "desire", "I want to keep my secret.")
        });
        assert!(
            error.contains(
                "Rachel: desire speaks in the first person (i, my); write about Rachel from \
                 outside"
            ),
            "{error}"
        );
        let curly = problems_of(|p| {
            forbid_first_person(
                p,
                Some("Rachel"),
                "belief",
                "I\u{2019}m the one Monica trusts.",
            )
        });
        assert!(curly.contains("(i'm)"), "{curly}");
        for fine in [
            "Rachel answers \"I said I'd think about it\" and keeps wiping.",
            "Rachel repeats \u{201c}my secret\u{201d} to Ross.",
            "Rachel says 'not mine' and hands the secret back to Ross.",
            "Ross's friend Rachel keeps the secret she promised to share.",
        ] {
            let found = problems_of(|p| forbid_first_person(p, Some("Rachel"), "belief", fine));
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn a_feeling_stated_as_the_characters_own_belief_is_named() {
        for (belief, shown) in [
            (
                "Ross feels a sense of shame about the secret.",
                "ross feels a",
            ),
            ("He is worried that Monica will find out.", "he is worried"),
            ("Feels that the party is ruined.", "feels that the"),
            ("Ross Geller is upset with Rachel.", "geller is upset"),
        ] {
            let error = problems_of(|p| forbid_feeling_as_belief(p, "Ross Geller", belief));
            assert!(
                error.contains(&format!(
                    "Ross Geller: belief says how Ross Geller feels (\"{shown}\"), not what Ross \
                     Geller holds true"
                )),
                "{belief}: {error}"
            );
        }
        for fine in [
            "Ross thinks Rachel is upset about being pushed.",
            "Rachel promised to tell Monica before the party.",
            "Ross is sure that Monica will be hurt if she hears it from Joey.",
        ] {
            let found = problems_of(|p| forbid_feeling_as_belief(p, "Ross Geller", fine));
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn an_unclosed_quote_is_named_and_closed_ones_and_apostrophes_are_not() {
        for bad in [
            "Ross says \"Fine, then to the van.",
            "Ross answers \u{201c}Fine.",
        ] {
            let found = problems_of(|p| forbid_open_quotes(p, Some("Ross"), "intention", bad));
            assert!(found.contains("opens a quotation mark"), "{bad}: {found}");
        }
        for fine in [
            "Ross says \"fine\" and leaves.",
            "Ross's \u{201c}fine\u{201d} ends it.",
            "Ross doesn't say it; it's Rachel's van.",
        ] {
            let found = problems_of(|p| forbid_open_quotes(p, Some("Ross"), "intention", fine));
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn words_glued_at_a_full_stop_are_named_and_abbreviations_are_not() {
        for (bad, shown) in [
            ("Ross goes to the rental.office to pay.", "rental.office"),
            ("Ross keeps the van.The deposit stays.", "van.The"),
        ] {
            let found = problems_of(|p| forbid_glued_words(p, None, "description", bad));
            assert!(found.contains(shown), "{bad}: {found}");
        }
        for fine in [
            "Ross pays, e.g. for the fuel, at 9 a.m. sharp.",
            "The tank holds 3.5 litres more than the U.S. model.",
            "Dr. Reyes sends the form to www.example.org today.",
            "Ross pays. Rachel drives.",
        ] {
            let found = problems_of(|p| forbid_glued_words(p, None, "description", fine));
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn a_role_among_those_it_addresses_in_a_list_is_named() {
        let mut ctx = fixture::context();
        ctx.participants.push("Monica".to_string());
        let check = |who: &str, text: &str| {
            problems_of(|p| forbid_self_address_in_lists(p, who, "intention", text, &ctx))
        };
        let found = check("Rachel", "Rachel tells Ross and Rachel the truth.");
        assert!(
            found.contains("lists Rachel among the people Rachel turns to"),
            "{found}"
        );
        let found = check("Ross", "Ross will ask Monica, Rachel and Ross to stay.");
        assert!(found.contains("(\"ask ... Ross\")"), "{found}");
        for fine in [
            // The list without the doer; the doer named as the one addressed by another.
            "Rachel tells Ross and Monica the truth.",
            "Monica asks Ross and Rachel to stay, and Rachel agrees.",
            "Ross and Rachel tell Monica the plan.",
            "Rachel tells Ross and Rachel's sister the truth.",
        ] {
            let found = check("Rachel", fine);
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn a_role_asking_or_telling_itself_is_named() {
        let mut ctx = fixture::context();
        ctx.participants.push("Mr. Heckles".to_string());
        let check = |who: &str, text: &str| {
            problems_of(|p| forbid_self_address(p, who, "intention", text, &ctx))
        };
        // The export's own: Theo asks Theo, Noor tells Noor.
        let error = check(
            "Ross",
            "Ross will ask Dennis if he has hit anything and will ask Ross if he wants to know \
             more about the van.",
        );
        assert!(
            error.contains("Ross: intention has Ross speaking to or acting on Ross (\"ask Ross\")"),
            "{error}"
        );
        let error = check(
            "Rachel",
            "If Rachel fails to tell Rachel and Ross the truth, it could lead to a conflict.",
        );
        assert!(error.contains("(\"tell Rachel\")"), "{error}");
        let error = check(
            "Mr. Heckles",
            "Mr. Heckles keeps asking Mr. Heckles about the noise.",
        );
        assert!(error.contains("(\"asking Mr. Heckles\")"), "{error}");
        for fine in [
            "Ross asks Rachel to tell Ross the truth.",
            "Ross asks Ross's sister to stay.",
            "Rachel will tell Ross, and Ross will ask Rachel why.",
            "Ross tells Mr. Heckles that the noise is over.",
        ] {
            let found = check("Ross", fine);
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn the_annotations_own_terms_are_named() {
        let error = problems_of(|p| {
            forbid_annotation_terms(
                p,
                "Noor",
                "expression_task",
                "Noor's expression style is honest_signaling, a clear sign of his conflict \
                 characteristic.",
            )
        });
        assert!(
            error.contains(
                "Noor: expression_task talks about the annotation (expression style, conflict \
                 characteristic, honest_signaling)"
            ),
            "{error}"
        );
        let error = problems_of(|p| {
            forbid_annotation_terms(
                p,
                "Mila",
                "interaction_regulation_task",
                "Mila does not steer the conversation, as the instruction does not provide any \
                 information about how she should interact.",
            )
        });
        assert!(
            error.contains("talks about the annotation (the instruction does, as the instruction)"),
            "{error}"
        );
        let error = problems_of(|p| {
            forbid_annotation_terms(
                p,
                "Mila",
                "characteristic_task",
                "Mila holds her ground in \
                the disagreement, as the profile has it.",
            )
        });
        assert!(error.contains("(as the profile)"), "{error}");
        for fine in [
            "Noor says plainly what the dent will cost and keeps his outcome open.",
            // The words in a scene of their own.
            "Bruno reads out the instructions on the clipboard before Noor signs.",
            "Theo reads Mila's profile of the neighbours aloud.",
        ] {
            let found =
                problems_of(|p| forbid_annotation_terms(p, "Noor", "expression_task", fine));
            assert!(found.is_empty(), "{fine}: {found}");
        }
    }

    #[test]
    fn a_sentence_restating_an_earlier_field_is_named() {
        let ctx = fixture::context();
        let background = "Ross and Rachel share a secret that Monica does not know. Rachel \
                          promised to tell it before the party.";
        let error = problems_of(|p| {
            forbid_restating(
                p,
                "description",
                "In the coffee house after closing, Ross presses Rachel. Rachel promised to tell \
                 the secret before the party.",
                "background",
                background,
                &ctx,
                "say the scene as it opens",
            )
        });
        assert!(
            error.contains(
                "description restates the background (\"Rachel promised to tell the secret \
                 before the party.\"); say the scene as it opens"
            ),
            "{error}"
        );
        let fine = problems_of(|p| {
            forbid_restating(
                p,
                "description",
                "In the coffee house after closing, Ross presses Rachel to name a time.",
                "background",
                background,
                &ctx,
                "say the scene as it opens",
            )
        });
        assert!(fine.is_empty(), "{fine}");
    }

    #[test]
    fn looks_and_mental_states_are_named() {
        let error = problems_of(|p| {
            forbid_looks_and_mental_states(
                p,
                "description",
                "Noor, wearing a red jacket, feels nervous in the van.",
            )
        });
        assert!(
            error.contains("description describes looks or clothing (wearing, jacket)"),
            "{error}"
        );
        assert!(
            error.contains("description describes feelings or thoughts (feels, nervous)"),
            "{error}"
        );
        let fine = problems_of(|p| {
            forbid_looks_and_mental_states(
                p,
                "description",
                "In the van at night, Noor asks Theo to face the landlord about the rent.",
            )
        });
        assert!(fine.is_empty(), "{fine}");
    }

    #[test]
    fn risks_need_a_social_cost() {
        let ctx = fixture::context();
        for generic in [
            "The character stands to lose if they do not get it",
            "No risk if they do not get it.",
            "Missing the delivery.",
            "No risk: Rachel would still be a friend.",
        ] {
            let error = problems_of(|p| require_social_cost(p, "Ross", generic, &ctx));
            assert!(
                error.contains("Ross: risk_if_failed names no concrete social cost"),
                "{generic}: {error}"
            );
        }
        for concrete in [
            "Losing Rachel's trust.",
            "Being blamed by the whole group for the secret.",
            "His friendship with her cools.",
        ] {
            let error = problems_of(|p| require_social_cost(p, "Ross", concrete, &ctx));
            assert!(error.is_empty(), "{concrete}: {error}");
        }
    }

    #[test]
    fn channels_are_named_by_their_words_only() {
        assert_eq!(
            channels_named("Noor gets Theo to meet her eyes and nod."),
            [
                (VisualChannel::Gaze, "eyes"),
                (VisualChannel::Gesture, "nod")
            ]
        );
        assert!(
            channels_named("Theo gets Noor to agree out loud to call the landlord tonight.")
                .is_empty()
        );
    }
}
