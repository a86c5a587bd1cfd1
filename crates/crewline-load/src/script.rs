//! What a simulated caller says, turn by turn, and what it does with what it heard: in the bank
//! scenario, a caller who never heard a transfer confirmed asks for it again, as a person on
//! the phone would (the case that moves money twice when a crew forgets a transfer it ran).

use std::collections::VecDeque;

use super::Scenario;

/// A transfer one call asked for (its amount is unique in the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// The amount in cents.
    pub(crate) cents: i64,
    /// The caller heard it was sent.
    pub(crate) confirmed: bool,
    /// The caller asked for it a second time.
    pub(crate) asked_again: bool,
}

/// The words of one call's turns.
pub(crate) struct Script {
    scenario: Scenario,
    session: usize,
    turns: usize,
    /// Scripted turns handed out so far.
    next: usize,
    /// Words to say before the next scripted turn (a transfer asked again).
    extra: VecDeque<String>,
    /// The call's transfers, in the order asked.
    pub(crate) transfers: Vec<Transfer>,
}

/// What the caller says to approve a transfer (a clear yes for the bank crew).
pub const BANK_YES: &str = "Yes, go ahead.";

/// The bank scenario's request for a transfer of `cents` to Alice.
pub fn bank_transfer_words(cents: i64) -> String {
    format!("Please send {} to Alice.", plain_dollars(cents))
}

/// The bank scenario's unique amount for scripted turn `turn` of `session`, in cents.
pub fn bank_amount(session: usize, turns: usize, turn: usize) -> i64 {
    let unique = session.saturating_mul(turns.max(1)).saturating_add(turn);
    i64::try_from(unique).unwrap_or(i64::MAX / 2) + 100
}

/// `$12.34`, without thousands separators.
fn plain_dollars(cents: i64) -> String {
    format!("${}.{:02}", cents / 100, cents % 100)
}

/// Whether `answer` says that `cents` was sent (the bank crew says "I've sent $1,234.56").
fn confirms(answer: &str, cents: i64) -> bool {
    let plain = answer.replace(',', "");
    plain.contains("sent") && plain.contains(&plain_dollars(cents))
}

impl Script {
    pub(crate) fn new(scenario: Scenario, session: usize, turns: usize) -> Self {
        Self {
            scenario,
            session,
            turns,
            next: 0,
            extra: VecDeque::new(),
            transfers: Vec::new(),
        }
    }

    /// Scripted turns not handed out yet (a transfer asked again adds turns).
    pub(crate) fn left(&self) -> usize {
        self.turns.saturating_sub(self.next) + self.extra.len()
    }

    /// The caller's words for the next turn; `None` when the call is over.
    pub(crate) fn next_words(&mut self) -> Option<String> {
        if let Some(words) = self.extra.pop_front() {
            return Some(words);
        }
        if self.next >= self.turns {
            return None;
        }
        let turn = self.next;
        self.next += 1;
        if self.scenario != Scenario::Bank {
            return Some(self.scenario.user_text(self.session, turn));
        }
        if turn % 3 == 1 {
            self.transfers.push(Transfer {
                cents: bank_amount(self.session, self.turns, turn),
                confirmed: false,
                asked_again: false,
            });
        }
        Some(self.scenario.user_text(self.session, turn).replace(
            "{amount}",
            &plain_dollars(bank_amount(self.session, self.turns, turn)),
        ))
    }

    /// The caller heard `answer` to `said`: a transfer it confirms is done; a yes that was not
    /// answered with the transfer confirmed makes the caller ask for it once more.
    pub(crate) fn heard(&mut self, said: &str, answer: &str) {
        if self.scenario != Scenario::Bank {
            return;
        }
        for transfer in &mut self.transfers {
            transfer.confirmed |= confirms(answer, transfer.cents);
        }
        if said != BANK_YES {
            return;
        }
        if let Some(last) = self.transfers.last_mut()
            && !last.confirmed
            && !last.asked_again
        {
            last.asked_again = true;
            self.extra.push_back(bank_transfer_words(last.cents));
            self.extra.push_back(BANK_YES.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(script: &mut Script) -> Vec<String> {
        std::iter::from_fn(|| script.next_words()).collect()
    }

    #[test]
    fn every_third_turn_asks_for_a_transfer_of_a_unique_amount_then_approves_it() {
        let mut first = Script::new(Scenario::Bank, 0, 6);
        let mut second = Script::new(Scenario::Bank, 1, 6);
        let said = words(&mut first);
        assert_eq!(said.len(), 6);
        assert_eq!(said[1], "Please send $1.01 to Alice.");
        assert_eq!(said[2], BANK_YES);
        assert_eq!(said[4], "Please send $1.04 to Alice.");
        assert!(said[0].contains("balance"), "{said:?}");
        words(&mut second);
        let amounts: Vec<i64> = first
            .transfers
            .iter()
            .chain(&second.transfers)
            .map(|t| t.cents)
            .collect();
        assert_eq!(amounts, [101, 104, 107, 110]);
    }

    #[test]
    fn a_transfer_not_confirmed_is_asked_for_once_more() {
        let mut script = Script::new(Scenario::Bank, 0, 3);
        let _ = script.next_words();
        let ask = script.next_words().unwrap();
        let yes = script.next_words().unwrap();
        script.heard(&ask, "Shall I transfer $1.01 to Alice?");
        script.heard(
            &yes,
            "I can check your balance or send money to one of your payees.",
        );
        assert_eq!(script.left(), 2);
        assert_eq!(script.next_words().as_deref(), Some(ask.as_str()));
        assert_eq!(script.next_words().as_deref(), Some(BANK_YES));
        script.heard(&yes, "Sorry, I couldn't do that.");
        assert_eq!(script.next_words(), None, "asked again once, not forever");
        assert!(script.transfers[0].asked_again);
        assert!(!script.transfers[0].confirmed);

        let mut told = Script::new(Scenario::Bank, 7, 3);
        let said = words(&mut told);
        told.heard(
            &said[2],
            "Done: I've sent $1.22 to Alice. Your new balance is $1,000.00.",
        );
        assert!(told.transfers[0].confirmed);
        assert_eq!(told.next_words(), None);
    }
}
