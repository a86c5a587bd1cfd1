// crewline playground: a faithful port of crewline-speech's SentenceAggregator
// (crates/crewline-speech/src/sentence.rs): streamed text chunks in, complete sentences out.
// The rules are those of the Rust module's docs; both are tested against the same cases
// (crates/crewline-speech/src/sentence/cases.json). Offsets here count code points where the
// Rust code counts bytes; the character predicates are the same Unicode properties
// (White_Space, Uppercase, Lowercase, Alphabetic).
"use strict";

(function (global) {
  const DEFAULT_MIN_CHARS = 8;

  const NEVER_FINAL = [
    "mr", "mrs", "ms", "mx", "dr", "prof", "rev", "hon", "st", "mt", "ft", "gen", "col", "capt",
    "lt", "sgt", "gov", "sen", "rep", "pres", "supt", "messrs", "mme", "mlle", "vs", "cf", "viz",
    "e.g", "i.e", "approx", "ca", "dept", "est", "ave", "blvd",
  ];
  const BEFORE_NUMBER = [
    "no", "nos", "nr", "p", "pp", "fig", "figs", "vol", "vols", "art", "sec", "ch", "eq", "op",
    "ref", "tel",
  ];
  const MAYBE_FINAL = [
    "etc", "inc", "ltd", "co", "corp", "jr", "sr", "bros", "llc", "plc", "esq", "al",
  ];

  const WHITE_SPACE = /^\p{White_Space}$/u;
  const UPPERCASE = /^\p{Uppercase}$/u;
  const LOWERCASE = /^\p{Lowercase}$/u;
  const ALPHABETIC = /^\p{Alphabetic}$/u;

  const isWhitespace = (c) => WHITE_SPACE.test(c);
  const isUppercase = (c) => UPPERCASE.test(c);
  const isLowercase = (c) => LOWERCASE.test(c);
  const isAlphabetic = (c) => ALPHABETIC.test(c);
  const isAsciiDigit = (c) => c >= "0" && c <= "9" && c.length === 1;
  const isAscii = (c) => c.codePointAt(0) < 0x80;

  /** Rust's `str::trim`: White_Space at both ends (not JavaScript's own set). */
  function trim(text) {
    const chars = Array.from(text);
    let start = 0;
    let end = chars.length;
    while (start < end && isWhitespace(chars[start])) start++;
    while (end > start && isWhitespace(chars[end - 1])) end--;
    return chars.slice(start, end).join("");
  }

  const charCount = (text) => Array.from(text).length;

  function isLatinMark(c) {
    return c === "!" || c === "?" || c === "‼" || c === "⁇" || c === "⁈" || c === "⁉";
  }

  const SCRIPT_MARKS = new Set([
    "。", "｡", "！", "？", "．", "।", "॥", "؟", "۔", "։", "።", "፧", "။", "។", "᙮", "\u037E", "܀",
  ]);
  const isScriptMark = (c) => SCRIPT_MARKS.has(c);

  function isEndMark(c) {
    return c === "." || c === "…" || c === "⋯" || isLatinMark(c) || isScriptMark(c);
  }

  const CLAUSE_MARKS = new Set([",", ";", ":", "，", "、", "；", "：", "،", "؛"]);
  const isClauseMark = (c) => CLAUSE_MARKS.has(c);

  const QUOTES = new Set(['"', "'", "”", "’", "»", "›", "«", "‹", "」", "』", "“", "‘"]);
  const isQuote = (c) => QUOTES.has(c);

  const CLOSERS = new Set([")", "]", "}", "）", "］", "｝", "】", "〉", "》", "〕", "*"]);
  const isCloser = (c) => isQuote(c) || CLOSERS.has(c);

  const OPENERS = new Set([
    "(", "[", "{", '"', "'", "“", "‘", "«", "‹", "「", "『", "（", "¿", "¡",
  ]);
  const isOpener = (c) => OPENERS.has(c);

  function isCjk(c) {
    const u = c.codePointAt(0);
    return (
      (u >= 0x3040 && u <= 0x30ff) ||
      (u >= 0x3400 && u <= 0x4dbf) ||
      (u >= 0x4e00 && u <= 0x9fff) ||
      (u >= 0xac00 && u <= 0xd7af) ||
      (u >= 0xff00 && u <= 0xffef)
    );
  }

  const SENTENCE_OPENERS = new Set(['"', "“", "‘", "«", "¿", "¡", "「", "『"]);
  function startsSentence(c) {
    return (
      isUppercase(c) || (isAlphabetic(c) && !isLowercase(c)) || SENTENCE_OPENERS.has(c)
    );
  }

  // Decisions: {end: i} (a sentence ends at i), {cont: i} (scan on from i), null (need more).
  const End = (i) => ({ end: i });
  const Continue = (i) => ({ cont: i });
  const NEED_MORE = null;

  /** The first character after the whitespace at `from`; null when the text ends first. */
  function nextWordStart(t, from) {
    for (let k = from; k < t.length; k++) {
      if (!isWhitespace(t[k])) return t[k];
    }
    return null;
  }

  /** The word just before `end`: back to whitespace or an opening bracket or quote. */
  function wordBefore(t, end) {
    let start = 0;
    for (let k = end - 1; k >= 0; k--) {
      if (isWhitespace(t[k]) || isOpener(t[k])) {
        start = k + 1;
        break;
      }
    }
    return t.slice(start, end).join("");
  }

  /** `U.S`, `a.m`, `Ph.D`: short letter groups joined by periods. */
  function isInitialism(word) {
    return (
      word.includes(".") &&
      word.split(".").every((part) => {
        const chars = Array.from(part);
        return chars.length >= 1 && chars.length <= 3 && chars.every(isAlphabetic);
      })
    );
  }

  /** A number of up to three digits alone at the start of a line. */
  function isListMarker(t, word, wordEnd) {
    const chars = Array.from(word);
    if (chars.length < 1 || chars.length > 3 || !chars.every(isAsciiDigit)) return false;
    const wordStart = wordEnd - chars.length;
    for (let k = wordStart - 1; k >= 0; k--) {
      if (t[k] !== " " && t[k] !== "\t") return t[k] === "\n";
    }
    return true;
  }

  function endsIfNextStartsSentence(next, end) {
    if (next === null) return NEED_MORE;
    return startsSentence(next) ? End(end) : Continue(end);
  }

  /** Whether the run of end marks starting at `start` of `t` (code points) ends a sentence. */
  function decide(t, start) {
    let j = start;
    let dots = 0;
    let ellipsis = false;
    let latin = false;
    let script = false;
    while (j < t.length && isEndMark(t[j])) {
      const c = t[j];
      if (c === ".") dots++;
      else if (c === "…" || c === "⋯") ellipsis = true;
      else if (isLatinMark(c)) latin = true;
      else script = true;
      j++;
    }
    const marksEnd = j;
    while (j < t.length && isCloser(t[j])) j++;
    const end = j;
    if (end >= t.length) return NEED_MORE;
    const next = t[end];
    const quoted = t.slice(marksEnd, end).some(isQuote);
    if (script) return End(end);
    const spaced = isWhitespace(next) || (latin && isCjk(next));
    if (!spaced) return Continue(end);
    const nextWord = () => nextWordStart(t, end);
    if (latin) {
      if (!quoted) return End(end);
      const c = nextWord();
      if (c === null) return NEED_MORE;
      return isLowercase(c) ? Continue(end) : End(end);
    }
    if (ellipsis || dots > 1) return endsIfNextStartsSentence(nextWord(), end);
    const word = wordBefore(t, start);
    const lower = word.toLowerCase();
    if (NEVER_FINAL.includes(lower)) return Continue(end);
    if (BEFORE_NUMBER.includes(lower)) {
      const c = nextWord();
      if (c === null) return NEED_MORE;
      return isAsciiDigit(c) || c === "#" ? Continue(end) : End(end);
    }
    const letters = Array.from(word);
    if (letters.length === 1) {
      const c = letters[0];
      if (c !== "I" && (isUppercase(c) || isLowercase(c))) return Continue(end);
    }
    if (MAYBE_FINAL.includes(lower) || isInitialism(word)) {
      return endsIfNextStartsSentence(nextWord(), end);
    }
    if (quoted) {
      const c = nextWord();
      if (c === null) return NEED_MORE;
      return isLowercase(c) ? Continue(end) : End(end);
    }
    if (isListMarker(t, word, start)) return Continue(end);
    return End(end);
  }

  /** Splits streamed text into sentences, as crewline-speech's `SentenceAggregator`. */
  class SentenceAggregator {
    /**
     * @param {number} [minChars] shortest sentence yielded on its own (default 8)
     * @param {number|null} [maxChars] past this many characters a clause mark ends a sentence
     */
    constructor(minChars = DEFAULT_MIN_CHARS, maxChars = null) {
      this.buffer = "";
      this.scanFrom = 0;
      this.minChars = minChars;
      this.maxChars = maxChars;
    }

    /** Adds a chunk and returns the sentences it completed, in order. */
    push(chunk) {
      this.buffer += chunk;
      const sentences = [];
      for (;;) {
        const t = Array.from(this.buffer);
        const scan = this.scan(t);
        if (scan.boundary === undefined) {
          this.scanFrom = scan.undecided;
          return sentences;
        }
        sentences.push(trim(t.slice(0, scan.boundary).join("")));
        this.buffer = t.slice(scan.boundary).join("");
        this.scanFrom = 0;
      }
    }

    /** Ends the turn: the text not yet yielded (trimmed), or null; empties the aggregator. */
    flush() {
      const rest = trim(this.buffer);
      this.buffer = "";
      this.scanFrom = 0;
      return rest === "" ? null : rest;
    }

    /** Drops the text not yet yielded (the caller barged in) and returns it. */
    discard() {
      const rest = this.buffer;
      this.buffer = "";
      this.scanFrom = 0;
      return rest;
    }

    /** The text received and not yet yielded. */
    pending() {
      return this.buffer;
    }

    longEnough(chars) {
      const sentence = trim(chars.join(""));
      return sentence !== "" && charCount(sentence) >= this.minChars;
    }

    scan(t) {
      let i = this.scanFrom;
      while (i < t.length) {
        const c = t[i];
        if (c === "\n") {
          if (this.longEnough(t.slice(0, i))) return { boundary: i };
          i += 1;
          continue;
        }
        if (
          this.maxChars !== null &&
          isClauseMark(c) &&
          charCount(trim(t.slice(0, i).join(""))) >= Math.max(this.maxChars, this.minChars)
        ) {
          const after = i + 1;
          if (after >= t.length) return { undecided: i };
          if (isWhitespace(t[after]) || !isAscii(c)) return { boundary: after };
        }
        if (isEndMark(c)) {
          const decision = decide(t, i);
          if (decision === NEED_MORE) return { undecided: i };
          if (decision.end !== undefined && this.longEnough(t.slice(0, decision.end))) {
            return { boundary: decision.end };
          }
          i = decision.end !== undefined ? decision.end : decision.cont;
          continue;
        }
        i += 1;
      }
      return { undecided: i };
    }
  }

  global.CrewlineSentence = { SentenceAggregator, DEFAULT_MIN_CHARS, trim };
})(typeof window !== "undefined" ? window : globalThis);
