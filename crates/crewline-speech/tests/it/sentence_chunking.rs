//! Property tests of the sentence aggregator: where the stream is cut does not change the
//! sentences, and the sentences give back the text.

use crewline_speech::SentenceAggregator;
use proptest::prelude::*;

/// Pieces of replies with every case the aggregator handles, joined into texts.
const PIECES: &[&str] = &[
    "Hello there",
    "how are you",
    "Dr.",
    "Mr. Jones",
    "e.g.",
    "i.e.",
    "U.S.",
    "a.m.",
    "etc.",
    "No. 5",
    "no.",
    "3.5",
    "$1,200.50",
    "J. K. Rowling",
    "I.",
    "1.",
    "21.",
    "...",
    "…",
    "Wait...what",
    ".",
    "!",
    "?",
    "?!",
    "!!!",
    "\"",
    "\")",
    "」",
    "(",
    "*",
    "you",
    "The",
    "it",
    "OK",
    "你好",
    "今天天气很好。",
    "我们走吧！",
    "吗？",
    "है।",
    "क्या",
    "صديقي؟",
    "եք։",
    "ወንድሜ።",
    "Yahoo!Mail",
    "example.com",
    ", ",
    "; ",
    ": ",
    "1,200",
    "，",
    "、",
    " ",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|pieces| pieces.concat())
}

/// `text` with cut points: byte offsets on character boundaries, in order.
fn text_and_cuts() -> impl Strategy<Value = (String, Vec<usize>)> {
    text().prop_flat_map(|text| {
        let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        let cuts = if boundaries.is_empty() {
            Just(Vec::new()).boxed()
        } else {
            prop::collection::btree_set(prop::sample::select(boundaries), 0..20)
                .prop_map(|set| set.into_iter().collect::<Vec<_>>())
                .boxed()
        };
        (Just(text), cuts)
    })
}

fn sentences_of(chunks: &[&str], min_chars: usize) -> (Vec<String>, Option<String>) {
    sentences_with(chunks, SentenceAggregator::with_min_chars(min_chars))
}

fn sentences_with(
    chunks: &[&str],
    mut aggregator: SentenceAggregator,
) -> (Vec<String>, Option<String>) {
    let mut sentences = Vec::new();
    for chunk in chunks {
        sentences.extend(aggregator.push(chunk));
    }
    (sentences, aggregator.flush())
}

fn chunks_at<'t>(text: &'t str, cuts: &[usize]) -> Vec<&'t str> {
    let mut chunks = Vec::new();
    let mut from = 0;
    for &cut in cuts {
        chunks.push(&text[from..cut]);
        from = cut;
    }
    chunks.push(&text[from..]);
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cutting_the_stream_anywhere_yields_the_same_sentences(
        (text, cuts) in text_and_cuts(),
        min_chars in prop::sample::select(vec![0usize, 1, 8, 20]),
    ) {
        let whole = sentences_of(&[&text], min_chars);
        let chunked = sentences_of(&chunks_at(&text, &cuts), min_chars);
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn cutting_the_stream_anywhere_cuts_long_sentences_the_same(
        (text, cuts) in text_and_cuts(),
        max_chars in prop::sample::select(vec![1usize, 10, 25, 60]),
    ) {
        let aggregator = SentenceAggregator::new().max_chars(Some(max_chars));
        let whole = sentences_with(&[&text], aggregator.clone());
        let chunked = sentences_with(&chunks_at(&text, &cuts), aggregator);
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn one_character_at_a_time_yields_the_same_sentences(text in text()) {
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        prop_assert_eq!(sentences_of(&chars, 8), sentences_of(&[&text], 8));
    }

    /// The documented whitespace rule: sentences are trimmed and the whitespace between them
    /// is dropped; put back, the sentences are exactly the input.
    #[test]
    fn the_sentences_are_the_input_less_the_whitespace_between_them(
        (text, cuts) in text_and_cuts(),
    ) {
        let (mut sentences, rest) = sentences_of(&chunks_at(&text, &cuts), 8);
        sentences.extend(rest);
        let mut remaining = text.as_str();
        for sentence in &sentences {
            prop_assert!(!sentence.is_empty());
            prop_assert_eq!(sentence.trim(), sentence.as_str());
            remaining = remaining.trim_start();
            prop_assert!(
                remaining.starts_with(sentence.as_str()),
                "{:?} does not continue with {:?}", remaining, sentence
            );
            remaining = &remaining[sentence.len()..];
        }
        prop_assert_eq!(remaining.trim(), "");
    }

    /// Only the end of the turn may be shorter than the minimum length.
    #[test]
    fn sentences_before_the_flush_are_at_least_the_minimum_length(
        text in text(),
        min_chars in 0usize..30,
    ) {
        let (sentences, _) = sentences_of(&[&text], min_chars);
        for sentence in sentences {
            prop_assert!(sentence.chars().count() >= min_chars, "{:?}", sentence);
        }
    }
}
