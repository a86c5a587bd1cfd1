use super::*;

/// Feeds `text` whole, then flushes; every sentence, in order.
fn split(text: &str) -> Vec<String> {
    split_with(SentenceAggregator::new(), text)
}

fn split_with(mut aggregator: SentenceAggregator, text: &str) -> Vec<String> {
    let mut sentences = aggregator.push(text);
    sentences.extend(aggregator.flush());
    sentences
}

/// Feeds `text` one character at a time: the smallest chunks a stream can have.
fn split_by_char(text: &str) -> Vec<String> {
    let mut aggregator = SentenceAggregator::new();
    let mut sentences = Vec::new();
    for c in text.chars() {
        sentences.extend(aggregator.push(c.encode_utf8(&mut [0; 4])));
    }
    sentences.extend(aggregator.flush());
    sentences
}

fn check(text: &str, expected: &[&str]) {
    assert_eq!(split(text), expected, "whole: {text:?}");
    assert_eq!(split_by_char(text), expected, "char by char: {text:?}");
}

#[test]
fn plain_sentences_split_at_their_end_marks() {
    check(
        "Hello there. How are you today? I am fine!",
        &["Hello there.", "How are you today?", "I am fine!"],
    );
}

#[test]
fn a_sentence_is_yielded_as_soon_as_the_next_one_begins() {
    let mut aggregator = SentenceAggregator::new();
    assert!(aggregator.push("The weather is nice").is_empty());
    assert!(
        aggregator.push(" today.").is_empty(),
        "the period may be an ellipsis"
    );
    assert_eq!(aggregator.push(" T"), ["The weather is nice today."]);
    assert_eq!(aggregator.pending(), " T");
    assert_eq!(aggregator.flush().as_deref(), Some("T"));
    assert_eq!(aggregator.flush(), None);
}

#[test]
fn titles_and_latin_abbreviations_do_not_end_a_sentence() {
    check(
        "Dr. Smith met Mr. Jones and Mrs. Brown at St. Mary's today. They talked.",
        &[
            "Dr. Smith met Mr. Jones and Mrs. Brown at St. Mary's today.",
            "They talked.",
        ],
    );
    check(
        "Bring fruit, e.g. apples or pears, i.e. something sweet. Then call me.",
        &[
            "Bring fruit, e.g. apples or pears, i.e. something sweet.",
            "Then call me.",
        ],
    );
    check(
        "It was Ali vs. Frazier in the ring. Nobody forgot it.",
        &["It was Ali vs. Frazier in the ring.", "Nobody forgot it."],
    );
}

#[test]
fn initialisms_end_a_sentence_only_before_a_new_one() {
    check(
        "I live in the U.S. and I love it. The food is great.",
        &["I live in the U.S. and I love it.", "The food is great."],
    );
    check(
        "He moved to the U.S. He loved it there.",
        &["He moved to the U.S.", "He loved it there."],
    );
    check(
        "The meeting is at 9 a.m. tomorrow morning. Be there.",
        &["The meeting is at 9 a.m. tomorrow morning.", "Be there."],
    );
    check(
        "She has a Ph.D. in physics from MIT. Impressive.",
        &["She has a Ph.D. in physics from MIT.", "Impressive."],
    );
}

#[test]
fn maybe_final_abbreviations_look_at_the_next_word() {
    check(
        "We sell apples, pears, etc. and more. Come by soon.",
        &["We sell apples, pears, etc. and more.", "Come by soon."],
    );
    check(
        "We sell apples, pears, etc. Come by soon.",
        &["We sell apples, pears, etc.", "Come by soon."],
    );
    check(
        "Apple Inc. is a company. It makes phones.",
        &["Apple Inc. is a company.", "It makes phones."],
    );
}

#[test]
fn initials_stay_with_the_name() {
    check(
        "The book by J. K. Rowling sold well. I read it.",
        &["The book by J. K. Rowling sold well.", "I read it."],
    );
    check(
        "Neither did I. Then we left the party.",
        &["Neither did I.", "Then we left the party."],
    );
}

#[test]
fn numbers_decimals_and_money_are_not_sentence_ends() {
    check(
        "The price went up by 3.5 percent to $1,200.50 today. That is a lot.",
        &[
            "The price went up by 3.5 percent to $1,200.50 today.",
            "That is a lot.",
        ],
    );
    check(
        "Version 1.2.3 is out now. Update soon.",
        &["Version 1.2.3 is out now.", "Update soon."],
    );
    check(
        "The score was 21. Then it rained hard.",
        &["The score was 21.", "Then it rained hard."],
    );
}

#[test]
fn number_abbreviations_continue_before_a_number() {
    check(
        "Please see No. 5 on the list. It is short.",
        &["Please see No. 5 on the list.", "It is short."],
    );
    check(
        "The answer is no. Then we left.",
        &["The answer is no.", "Then we left."],
    );
    check(
        "Look at fig. 3 and p. 12 for details. Thanks.",
        &["Look at fig. 3 and p. 12 for details.", "Thanks."],
    );
}

#[test]
fn ellipses_end_a_sentence_only_before_a_new_one() {
    check(
        "I was thinking... maybe we could go. I don't know... Let me check.",
        &[
            "I was thinking... maybe we could go.",
            "I don't know...",
            "Let me check.",
        ],
    );
    check(
        "Well… that is odd. Hmm…… Let me see here.",
        &["Well… that is odd.", "Hmm…… Let me see here."],
    );
    check(
        "Wait...what happened here?",
        &["Wait...what happened here?"],
    );
}

#[test]
fn quotes_and_brackets_after_the_mark_stay_with_the_sentence() {
    check(
        "He said \"I am done.\" Then he left the room.",
        &["He said \"I am done.\"", "Then he left the room."],
    );
    check(
        "(This is an aside.) And this is not.",
        &["(This is an aside.)", "And this is not."],
    );
    check(
        "\"Stop right there!\" she said loudly. He stopped.",
        &["\"Stop right there!\" she said loudly.", "He stopped."],
    );
    check(
        "It was **really important.** Remember that.",
        &["It was **really important.**", "Remember that."],
    );
}

#[test]
fn runs_of_marks_end_one_sentence() {
    check(
        "You did what?! That is amazing!!! Tell me more?!?",
        &["You did what?!", "That is amazing!!!", "Tell me more?!?"],
    );
    check(
        "Visit example.com today. Or call Yahoo!Mail support.",
        &["Visit example.com today.", "Or call Yahoo!Mail support."],
    );
}

#[test]
fn line_breaks_end_sentences_and_list_markers_do_not() {
    check(
        "Here are the steps:\n1. Open the app\n2. Tap settings\n\nThat is all for now.",
        &[
            "Here are the steps:",
            "1. Open the app",
            "2. Tap settings",
            "That is all for now.",
        ],
    );
}

#[test]
fn non_latin_end_marks_split_without_spaces() {
    check(
        "你好，今天天气很好。我们去公园散步吧！你想去吗？",
        &["你好，今天天气很好。", "我们去公园散步吧！", "你想去吗？"],
    );
    check(
        "今日はとても良い天気ですね。散歩に行きましょう！",
        &["今日はとても良い天気ですね。", "散歩に行きましょう！"],
    );
    check(
        "आज मौसम बहुत अच्छा है। क्या आप बाहर चलेंगे?",
        &["आज मौसम बहुत अच्छा है।", "क्या आप बाहर चलेंगे?"],
    );
    check(
        "كيف حالك اليوم يا صديقي؟ أنا بخير والحمد لله.",
        &["كيف حالك اليوم يا صديقي؟", "أنا بخير والحمد لله."],
    );
    check(
        "Բարև ձեզ, ինչպես եք։ Ես լավ եմ, շնորհակալություն։",
        &["Բարև ձեզ, ինչպես եք։", "Ես լավ եմ, շնորհակալություն։"],
    );
    check(
        "ሰላም ነው ወንድሜ። ደህና ነኝ አመሰግናለሁ።",
        &["ሰላም ነው ወንድሜ።", "ደህና ነኝ አመሰግናለሁ።"],
    );
    check(
        "他说：「今天下雨了。」我们留在家里。",
        &["他说：「今天下雨了。」", "我们留在家里。"],
    );
    check(
        "Is that right?我不太确定这个答案。",
        &["Is that right?", "我不太确定这个答案。"],
    );
}

#[test]
fn short_fragments_merge_with_the_next_sentence() {
    check(
        "Hi! How are you doing? OK. Good to hear that.",
        &["Hi! How are you doing?", "OK. Good to hear that."],
    );
    assert_eq!(
        split_with(SentenceAggregator::with_min_chars(0), "Hi! OK. Yes."),
        ["Hi!", "OK.", "Yes."]
    );
}

#[test]
fn a_long_run_on_sentence_is_cut_at_a_clause_mark_past_the_maximum() {
    let aggregator = SentenceAggregator::new().max_chars(Some(30));
    assert_eq!(
        split_with(
            aggregator.clone(),
            "We have apples, pears and plums, grapes in three colours, and cherries, \
                 which cost $1,200 a ton; ask me. Short one, here."
        ),
        [
            "We have apples, pears and plums,",
            "grapes in three colours, and cherries,",
            "which cost $1,200 a ton; ask me.",
            "Short one, here."
        ]
    );
    assert_eq!(
        split_with(
            aggregator,
            "我们有苹果、梨和李子，还有三种颜色的葡萄，以及樱桃。"
        ),
        ["我们有苹果、梨和李子，还有三种颜色的葡萄，以及樱桃。"],
        "30 characters are not reached"
    );
    assert_eq!(
        split_with(
            SentenceAggregator::new().max_chars(Some(8)),
            "我们有苹果、梨和李子，还有三种颜色的葡萄，以及樱桃。"
        ),
        [
            "我们有苹果、梨和李子，",
            "还有三种颜色的葡萄，",
            "以及樱桃。"
        ]
    );
}

#[test]
fn a_chunk_boundary_inside_an_abbreviation_changes_nothing() {
    let mut aggregator = SentenceAggregator::new();
    let mut sentences = Vec::new();
    for chunk in [
        "Please ask D",
        "r",
        ".",
        " Smith about it",
        ". He",
        " knows.",
    ] {
        sentences.extend(aggregator.push(chunk));
    }
    assert_eq!(sentences, ["Please ask Dr. Smith about it."]);
    assert_eq!(aggregator.flush().as_deref(), Some("He knows."));
}

#[test]
fn discard_drops_the_pending_text_and_the_aggregator_starts_over() {
    let mut aggregator = SentenceAggregator::new();
    assert_eq!(
        aggregator.push("First sentence here. Second one is cut"),
        ["First sentence here."]
    );
    assert_eq!(aggregator.discard(), " Second one is cut");
    assert_eq!(aggregator.pending(), "");
    assert_eq!(
        aggregator.push("A new turn begins. "),
        ["A new turn begins."]
    );
    assert_eq!(aggregator.flush(), None);
}

#[test]
fn flush_yields_the_rest_even_when_short_or_unfinished() {
    let mut aggregator = SentenceAggregator::new();
    assert!(aggregator.push("  Ok").is_empty());
    assert_eq!(aggregator.flush().as_deref(), Some("Ok"));
    assert!(aggregator.push("   \n ").is_empty());
    assert_eq!(aggregator.flush(), None);
}
