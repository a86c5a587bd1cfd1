//! What tokens cost: a price table per model, and money kept in integers so sums never drift.
//!
//! Prices are per million tokens, as providers publish them, with up to six decimals
//! (`0.15`, `2.50`, `0.075`); money is counted in pico-units of the table's currency
//! (10⁻¹² of a dollar, say), so a price with six decimals times any token count is exact, and
//! a call's or a server's total is a plain integer sum.
//!
//! ```
//! use crewline_llm::{PriceTable, Usage};
//!
//! let prices: PriceTable = "gpt-4o-mini=0.15,0.075,0.60".parse()?;
//! let usage = Usage { prompt_tokens: 1_000, cached_tokens: 400, completion_tokens: 50, ..Usage::default() };
//! let cost = prices.cost("gpt-4o-mini", &usage).expect("priced");
//! // 600 × 0.15 + 400 × 0.075 + 50 × 0.60, per million tokens
//! assert_eq!(cost.to_string(), "0.00015");
//! assert!(prices.cost("unknown-model", &usage).is_none());
//! # Ok::<(), crewline_llm::PriceError>(())
//! ```

use std::{collections::HashMap, fmt, str::FromStr, sync::Mutex};

use crate::Usage;

/// Pico-units (10⁻¹²) per unit of currency.
const PICOS_PER_UNIT: u64 = 1_000_000_000_000;

/// Micro-units (10⁻⁶) per unit of currency: the precision of a price per million tokens.
const MICROS_PER_UNIT: u64 = 1_000_000;

/// The most unknown model names a table warns about, each once (the names come from the
/// team's settings or a provider's name: few; the cap keeps a misconfigured crew's log short).
const MAX_WARNED_MODELS: usize = 32;

/// An amount of money in pico-units of the price table's currency (exact integer sums).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(u64);

impl Money {
    /// No money.
    pub const ZERO: Self = Self(0);

    /// An amount of `picos` pico-units (10⁻¹² of a unit).
    pub const fn from_picos(picos: u64) -> Self {
        Self(picos)
    }

    /// The amount in pico-units (10⁻¹² of a unit).
    pub const fn picos(self) -> u64 {
        self.0
    }

    /// The amount in whole micro-units (10⁻⁶ of a unit), rounded down.
    pub const fn micros(self) -> u64 {
        self.0 / (PICOS_PER_UNIT / MICROS_PER_UNIT)
    }

    /// The sum, saturating at the largest amount (about 18 million units).
    #[must_use]
    pub const fn saturating_add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }
}

impl std::ops::AddAssign for Money {
    fn add_assign(&mut self, other: Self) {
        *self = self.saturating_add(other);
    }
}

/// A decimal number of units, without trailing zeros (`0.00015`, `2`, `0`).
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / PICOS_PER_UNIT;
        let fraction = self.0 % PICOS_PER_UNIT;
        if fraction == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{fraction:012}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// One model's prices, in micro-units of currency per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Price {
    /// Per million prompt tokens not read from the provider's cache.
    pub prompt: u64,
    /// Per million prompt tokens read from the provider's cache.
    pub cached_prompt: u64,
    /// Per million completion tokens (reasoning tokens are completion tokens).
    pub completion: u64,
}

impl Price {
    /// Prices from decimal strings per million tokens (`"0.15"`, `"0.075"`, `"0.60"`).
    pub fn parse(prompt: &str, cached_prompt: &str, completion: &str) -> Result<Self, PriceError> {
        Ok(Self {
            prompt: parse_micros(prompt)?,
            cached_prompt: parse_micros(cached_prompt)?,
            completion: parse_micros(completion)?,
        })
    }

    /// What `usage` costs at these prices.
    pub fn cost(&self, usage: &Usage) -> Money {
        let cached = u64::from(usage.cached_tokens.min(usage.prompt_tokens));
        let fresh = u64::from(usage.prompt_tokens) - cached;
        let completion = u64::from(usage.completion_tokens);
        // Tokens × micro-units per million tokens = pico-units: exact, no division.
        let picos = fresh
            .saturating_mul(self.prompt)
            .saturating_add(cached.saturating_mul(self.cached_prompt))
            .saturating_add(completion.saturating_mul(self.completion));
        Money(picos)
    }
}

/// Why a price table could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// A price is not a decimal number with at most six decimals.
    #[error("`{0}` is not a price per million tokens (a decimal with at most six decimals)")]
    Number(String),
    /// An entry is not `model=prompt,cached_prompt,completion`.
    #[error("`{0}` is not `model=prompt,cached_prompt,completion`")]
    Entry(String),
}

/// A decimal with at most six decimals, in micro-units.
fn parse_micros(text: &str) -> Result<u64, PriceError> {
    let text = text.trim();
    let bad = || PriceError::Number(crewline_core::prefix(text, 64).to_owned());
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty()
        || !digits(whole)
        || !digits(fraction)
        || fraction.len() > 6
    {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let mut micros: u64 = 0;
    for (place, digit) in fraction.bytes().enumerate() {
        let scale = 10u64.pow(5 - u32::try_from(place).map_err(|_| bad())?);
        micros += u64::from(digit - b'0') * scale;
    }
    whole
        .checked_mul(MICROS_PER_UNIT)
        .and_then(|w| w.checked_add(micros))
        .ok_or_else(bad)
}

/// Prices per model: turns a turn's [`Usage`] into [`Money`].
///
/// Read from text ([`FromStr`]): entries `model=prompt,cached_prompt,completion` (decimals per
/// million tokens), separated by newlines or `;`; blank lines and `#` comments are skipped.
/// A model the table does not name costs nothing it can say: [`cost`](Self::cost) is `None`,
/// and the table warns once per such model.
#[derive(Debug, Default)]
pub struct PriceTable {
    prices: HashMap<String, Price>,
    /// Unknown models already warned about.
    warned: Mutex<Vec<String>>,
}

impl Clone for PriceTable {
    fn clone(&self) -> Self {
        Self {
            prices: self.prices.clone(),
            warned: Mutex::default(),
        }
    }
}

impl PartialEq for PriceTable {
    fn eq(&self, other: &Self) -> bool {
        self.prices == other.prices
    }
}

impl PriceTable {
    /// An empty table (every model unknown).
    pub fn new() -> Self {
        Self::default()
    }

    /// The same table with `model` at `price`.
    #[must_use]
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The prices of `model`, if the table names it.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }

    /// The models the table names.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.prices.keys().map(String::as_str)
    }

    /// What `usage` on `model` cost, or `None` for a model the table does not name (warned
    /// once per model: the usage is still reported, without money).
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<Money> {
        match self.prices.get(model) {
            Some(price) => Some(price.cost(usage)),
            None => {
                self.warn_unknown(model);
                None
            }
        }
    }

    fn warn_unknown(&self, model: &str) {
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if warned.len() >= MAX_WARNED_MODELS || warned.iter().any(|m| m == model) {
            return;
        }
        warned.push(model.to_owned());
        drop(warned);
        tracing::warn!(
            model = crewline_core::prefix(model, 128),
            "no price for this model: its usage is reported without money"
        );
    }
}

impl FromStr for PriceTable {
    type Err = PriceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut table = Self::new();
        for entry in text.split(['\n', ';']) {
            let entry = entry.split('#').next().unwrap_or_default().trim();
            if entry.is_empty() {
                continue;
            }
            let bad = || PriceError::Entry(crewline_core::prefix(entry, 128).to_owned());
            let (model, prices) = entry.split_once('=').ok_or_else(bad)?;
            let parts: Vec<&str> = prices.split(',').collect();
            let [prompt, cached, completion] = parts.as_slice() else {
                return Err(bad());
            };
            let model = model.trim();
            if model.is_empty() {
                return Err(bad());
            }
            table = table.with(model, Price::parse(prompt, cached, completion)?);
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u32, cached: u32, completion: u32) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            cached_tokens: cached,
            reasoning_tokens: 0,
        }
    }

    #[test]
    fn prices_parse_exactly() {
        assert_eq!(parse_micros("0.15"), Ok(150_000));
        assert_eq!(parse_micros("2.50"), Ok(2_500_000));
        assert_eq!(parse_micros(".075"), Ok(75_000));
        assert_eq!(parse_micros("10"), Ok(10_000_000));
        assert_eq!(parse_micros("0.000001"), Ok(1));
        for bad in [
            "",
            ".",
            "1.0000001",
            "-1",
            "1e3",
            "abc",
            "1.2.3",
            "99999999999999999999",
        ] {
            assert!(parse_micros(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cost_is_exact_and_sums_do_not_drift() {
        let price = Price::parse("0.15", "0.075", "0.60").unwrap();
        // 333 fresh prompt tokens at 0.15 per million: 0.00004995, not a float's neighbour.
        assert_eq!(price.cost(&usage(333, 0, 0)).to_string(), "0.00004995");
        // A million turns of it add up to exactly 49.95.
        let mut total = Money::ZERO;
        for _ in 0..1_000_000 {
            total += price.cost(&usage(333, 0, 0));
        }
        assert_eq!(total.to_string(), "49.95");
        // Cached tokens are a part of the prompt, at their own price.
        assert_eq!(price.cost(&usage(1_000, 400, 50)).to_string(), "0.00015");
        // More cached than prompt tokens (a confused server): never more than the prompt.
        assert_eq!(price.cost(&usage(10, 50, 0)), price.cost(&usage(10, 10, 0)));
        assert_eq!(Money::from_picos(1_500_000).micros(), 1);
        assert_eq!(Money::ZERO.to_string(), "0");
    }

    #[test]
    fn tables_read_entries_and_refuse_bad_ones() {
        let table: PriceTable =
            "# prices\ngpt-4o-mini = 0.15, 0.075, 0.60\n\nlocal=0,0,0; big=5,2.5,15"
                .parse()
                .unwrap();
        assert_eq!(table.models().count(), 3);
        assert_eq!(table.price("big").map(|p| p.completion), Some(15_000_000));
        assert_eq!(table.cost("local", &usage(5, 0, 5)), Some(Money::ZERO));
        assert_eq!(table.cost("nope", &usage(5, 0, 5)), None);
        assert!(matches!(
            "m=1,2".parse::<PriceTable>(),
            Err(PriceError::Entry(_))
        ));
        assert!(matches!(
            "=1,2,3".parse::<PriceTable>(),
            Err(PriceError::Entry(_))
        ));
        assert!(matches!(
            "m=1,x,3".parse::<PriceTable>(),
            Err(PriceError::Number(_))
        ));
    }
}
