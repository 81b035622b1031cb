//! The closed vocabularies the annotation steps choose from.
//!
//! Each enum's wire spelling is written once, in [`vocabulary!`], and serves serde, the JSON
//! schemas ([`Vocabulary::ALL`] feeds their `enum` lists) and the prompts' wording alike, so the
//! three cannot drift apart.

use std::borrow::Borrow;

/// A closed set of labels with one spelling each.
pub trait Vocabulary: Copy + 'static {
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;
}

macro_rules! vocabulary {
    (
        $(#[$meta:meta])* $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize,
            serde::Deserialize,
        )]
        pub enum $name {
            $($(#[$variant_meta])* #[serde(rename = $text)] $variant),+
        }

        impl $crate::annotation::vocab::Vocabulary for $name {
            const ALL: &'static [$name] = &[$($name::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl $name {
            pub const ALL: &'static [$name] =
                <$name as $crate::annotation::vocab::Vocabulary>::ALL;
            pub fn as_str(self) -> &'static str {
                $crate::annotation::vocab::Vocabulary::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// The labels, inline wherever a record schema names the type.
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "enum": [$($text),+] })
            }
        }
    };
}

pub(crate) use vocabulary;

vocabulary! {
    /// What the talk in a scenario is for (Walton's dialogue types as AgentViSS uses them).
    DialogueType {
        InformationSeeking = "information_seeking",
        Deliberation = "deliberation",
        Persuasion = "persuasion",
        Eristic = "eristic",
    }
}

vocabulary! {
    Gender {
        Male = "male",
        Female = "female",
        NonBinary = "non_binary",
        /// The dialogue gives no clue.
        Unknown = "unknown",
    }
}

vocabulary! {
    /// How a role lets its inner state show in what it says.
    ExpressionStyle {
        HonestSignaling = "honest_signaling",
        StrategicWithholding = "strategic_withholding",
        Deception = "deception",
        Exaggeration = "exaggeration",
        Suppression = "suppression",
    }
}

vocabulary! {
    /// How a role handles the scenario's conflict (the Thomas-Kilmann modes).
    ConflictCharacteristic {
        Competing = "competing",
        Collaborating = "collaborating",
        Compromising = "compromising",
        Avoiding = "avoiding",
        Accommodating = "accommodating",
    }
}

vocabulary! {
    /// How many of a scenario's roles compete: all (high), some (medium), none (low).
    ConflictIntensity {
        High = "high",
        Medium = "medium",
        Low = "low",
    }
}

vocabulary! {
    /// A role's emotion when the scenario starts.
    Emotion {
        Joy = "joy",
        Sadness = "sadness",
        Fear = "fear",
        Anger = "anger",
        Surprise = "surprise",
        Disgust = "disgust",
        Neutral = "neutral",
    }
}

vocabulary! {
    /// Whether judging an interaction-outcome task needs what the characters can see.
    VisionDependenceClass {
        /// Cannot be judged from the words alone: it turns on a visible cue.
        Strongly = "strongly",
        /// The words (and inner thoughts) suffice to judge it.
        Weakly = "weakly",
    }
}

vocabulary! {
    /// A visible cue a strongly vision-dependent task turns on.
    VisualChannel {
        Gaze = "gaze",
        FacialExpression = "facial_expression",
        VisibleEmotion = "visible_emotion",
        Posture = "posture",
        Gesture = "gesture",
        Proximity = "proximity",
    }
}

impl ConflictCharacteristic {
    /// The characteristics a role that must not compete can take instead.
    pub const NON_COMPETING: &'static [ConflictCharacteristic] = &[
        ConflictCharacteristic::Collaborating,
        ConflictCharacteristic::Compromising,
        ConflictCharacteristic::Avoiding,
        ConflictCharacteristic::Accommodating,
    ];

    pub fn is_competing(self) -> bool {
        self == ConflictCharacteristic::Competing
    }

    /// Third person singular, for explanations: "Ross avoids".
    pub fn verb(self) -> &'static str {
        match self {
            ConflictCharacteristic::Competing => "competes",
            ConflictCharacteristic::Collaborating => "collaborates",
            ConflictCharacteristic::Compromising => "compromises",
            ConflictCharacteristic::Avoiding => "avoids",
            ConflictCharacteristic::Accommodating => "accommodates",
        }
    }
}

impl ConflictIntensity {
    /// The intensity a set of roles' characteristics gives: high when every role competes,
    /// low when none does, medium otherwise. No roles at all counts as low (nobody competes).
    pub fn of<C: Borrow<ConflictCharacteristic>>(
        characteristics: impl IntoIterator<Item = C>,
    ) -> ConflictIntensity {
        let (mut competing, mut total) = (0usize, 0usize);
        for characteristic in characteristics {
            total += 1;
            if characteristic.borrow().is_competing() {
                competing += 1;
            }
        }
        match competing {
            0 => ConflictIntensity::Low,
            n if n == total => ConflictIntensity::High,
            _ => ConflictIntensity::Medium,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_spellings_match<
        V: Vocabulary
            + serde::Serialize
            + for<'de> serde::Deserialize<'de>
            + PartialEq
            + std::fmt::Debug,
    >() {
        for &label in V::ALL {
            let json = serde_json::to_value(label).unwrap();
            assert_eq!(json, serde_json::Value::from(label.as_str()));
            assert_eq!(serde_json::from_value::<V>(json).unwrap(), label);
        }
    }

    #[test]
    fn wire_spellings_are_snake_case_and_round_trip() {
        serde_spellings_match::<DialogueType>();
        serde_spellings_match::<Gender>();
        serde_spellings_match::<ExpressionStyle>();
        serde_spellings_match::<ConflictCharacteristic>();
        serde_spellings_match::<ConflictIntensity>();
        serde_spellings_match::<Emotion>();
        serde_spellings_match::<VisionDependenceClass>();
        serde_spellings_match::<VisualChannel>();
        assert_eq!(
            ExpressionStyle::HonestSignaling.as_str(),
            "honest_signaling"
        );
    }

    #[test]
    fn intensity_of_characteristics() {
        use ConflictCharacteristic::*;
        assert_eq!(
            ConflictIntensity::of([Competing, Competing]),
            ConflictIntensity::High
        );
        assert_eq!(
            ConflictIntensity::of([Competing, Avoiding].iter()),
            ConflictIntensity::Medium
        );
        assert_eq!(
            ConflictIntensity::of(vec![Avoiding, Accommodating]),
            ConflictIntensity::Low
        );
        assert_eq!(ConflictIntensity::of([Competing]), ConflictIntensity::High);
        assert_eq!(
            ConflictIntensity::of(Vec::<ConflictCharacteristic>::new()),
            ConflictIntensity::Low
        );
    }
}
