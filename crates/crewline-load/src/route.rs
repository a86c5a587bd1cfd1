//! The router scenario ([`super::Scenario::Router`]): which sub-agent of the collections crew
//! (`examples/collections_router.rs`, intake -> verify -> resolve) a call is in, and whether a
//! call that reconnected after a drop was answered by the sub-agent it was in.
//!
//! The place is followed from the `agent.log` `agent.transition` events `{from, to, state}` the
//! router sends on each move (before the turn's `end`). The sub-agent that answered a turn is
//! read, in this order, from: the turn's first transition (its `from`, or its `to` when `from`
//! is null: the router's start, logged by a router that did not resume); else the tool the
//! scripted model called (each sub-agent has its own: `find_account` is intake's,
//! `verify_identity` verify's, `propose_payment_plan` resolve's, and every scripted turn calls
//! one); else the scripted model's words (each sub-agent asks its own question). A turn none of
//! these place is answered by an unknown sub-agent, which counts as a wrong one.
//!
//! A turn answered after a reconnect may be answered in the sub-agent the call was in after
//! its last answered turn, or in the one the last transition received before the drop moved it
//! to (a drop inside a turn that moved the router: the turn is sent again, and redoing it from
//! where it began or going on from where it got are both the call's own place).

use std::collections::BTreeSet;

/// The sub-agent a router call starts in.
pub const ROUTER_START: &str = "intake";

/// The collections crew's account and date of birth a router call gives (two accounts on its
/// books, alternating by call).
pub fn router_account(session: usize) -> (&'static str, &'static str) {
    if session.is_multiple_of(2) {
        ("12345", "1980-04-02")
    } else {
        ("67890", "1975-11-30")
    }
}

/// The router scenario's words for `turn` of `session`: the account number (intake), the date
/// of birth (verify), then a monthly payment (resolve) on every later turn.
pub fn router_words(session: usize, turn: usize) -> String {
    let (account, born) = router_account(session);
    match turn {
        0 => format!("My account number is {account}."),
        1 => format!("My date of birth is {born}."),
        // At least 10 dollars (the crew's floor) and two digits (what resolve reads).
        _ => format!("I can pay {} dollars a month.", 20 + turn % 70),
    }
}

/// The sub-agent whose tool `name` is.
fn sub_agent_of_tool(name: &str) -> Option<&'static str> {
    match name {
        "find_account" => Some("intake"),
        "verify_identity" => Some("verify"),
        "propose_payment_plan" => Some("resolve"),
        _ => None,
    }
}

/// The sub-agent whose scripted words `answer` are (its question when it had nothing to do).
fn sub_agent_of_words(answer: &str) -> Option<&'static str> {
    if answer.contains("What is your account number") {
        Some("intake")
    } else if answer.contains("date of birth, year first") {
        Some("verify")
    } else if answer.contains("How much could you pay") {
        Some("resolve")
    } else {
        None
    }
}

/// What one attempt at a turn showed of the router: its transitions and the tools called.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TurnRoute {
    /// `(from, to)` of each `agent.transition`, in order.
    pub(crate) transitions: Vec<(Option<String>, String)>,
    /// The tools called (`tool_call_start`), in order.
    pub(crate) tools: Vec<String>,
}

impl TurnRoute {
    /// The sub-agent that answered this turn, if it can be told (see the module docs).
    pub(crate) fn answered_by(&self, answer: &str) -> Option<String> {
        if let Some((from, to)) = self.transitions.first() {
            return Some(from.clone().unwrap_or_else(|| to.clone()));
        }
        self.tools
            .iter()
            .find_map(|tool| sub_agent_of_tool(tool))
            .or_else(|| sub_agent_of_words(answer))
            .map(str::to_owned)
    }

    /// Where the router is after this turn's moves, if it moved.
    fn moved_to(&self) -> Option<&str> {
        self.transitions.last().map(|(_, to)| to.as_str())
    }
}

/// A resumed turn answered by a sub-agent the call was not in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrongSubAgent {
    /// The turn, counted from 0.
    pub(crate) turn: usize,
    /// The sub-agents it could rightly be answered in.
    pub(crate) expected: Vec<String>,
    /// The one that answered (`None`: it could not be told).
    pub(crate) answered: Option<String>,
}

/// One router call's place, and what its resumed turns showed.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The sub-agent the call is in after its last answered turn.
    place: String,
    /// Set by a drop until the next answered turn: where that turn may be answered.
    resuming: Option<BTreeSet<String>>,
    /// Turns answered after a reconnect.
    pub(crate) resumed_turns: u64,
    /// The first resumed turn answered in the wrong sub-agent.
    pub(crate) wrong: Option<WrongSubAgent>,
}

impl Default for Route {
    fn default() -> Self {
        Self {
            place: ROUTER_START.to_owned(),
            resuming: None,
            resumed_turns: 0,
            wrong: None,
        }
    }
}

impl Route {
    /// The sub-agent the call is in after its last answered turn.
    #[cfg(test)]
    pub(crate) fn place(&self) -> &str {
        &self.place
    }

    /// The connection dropped; `seen` is what the turn in flight showed before (empty between
    /// turns). Drops before the next answer add places, never remove them.
    pub(crate) fn dropped(&mut self, seen: &TurnRoute) {
        let places = self.resuming.get_or_insert_with(BTreeSet::new);
        places.insert(self.place.clone());
        if let Some(to) = seen.moved_to() {
            places.insert(to.to_owned());
        }
    }

    /// Turn `turn` was answered with `answer`, its attempt having shown `seen`: a resumed turn
    /// is checked, and the place follows the turn's moves.
    pub(crate) fn answered(&mut self, turn: usize, seen: &TurnRoute, answer: &str) {
        if let Some(expected) = self.resuming.take() {
            self.resumed_turns += 1;
            let answered = seen.answered_by(answer);
            let right = answered.as_ref().is_some_and(|a| expected.contains(a));
            if !right && self.wrong.is_none() {
                self.wrong = Some(WrongSubAgent {
                    turn,
                    expected: expected.into_iter().collect(),
                    answered,
                });
            }
        }
        if let Some(to) = seen.moved_to() {
            self.place = to.to_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(from: Option<&str>, to: &str, tool: &str) -> TurnRoute {
        TurnRoute {
            transitions: vec![(from.map(str::to_owned), to.to_owned())],
            tools: vec![tool.to_owned()],
        }
    }

    #[test]
    fn each_turn_asks_the_next_sub_agent_for_what_it_needs() {
        assert_eq!(router_words(0, 0), "My account number is 12345.");
        assert_eq!(router_words(0, 1), "My date of birth is 1980-04-02.");
        assert_eq!(router_words(1, 1), "My date of birth is 1975-11-30.");
        assert_eq!(router_words(0, 2), "I can pay 22 dollars a month.");
        assert_eq!(router_words(3, 5), "I can pay 25 dollars a month.");
    }

    #[test]
    fn the_place_follows_the_transitions_and_a_call_resumed_where_it_was_is_right() {
        let mut route = Route::default();
        let mut first = moved(Some("intake"), "verify", "find_account");
        first.transitions.insert(0, (None, "intake".to_owned()));
        route.answered(0, &first, "Thanks, Jordan Lee.");
        assert_eq!(route.place(), "verify");
        // Dropped between turns; the next turn is answered by verify, which moves on.
        route.dropped(&TurnRoute::default());
        route.answered(
            1,
            &moved(Some("verify"), "resolve", "verify_identity"),
            "Thank you, you're verified.",
        );
        assert_eq!(route.place(), "resolve");
        // Dropped mid-turn with nothing seen; resolve answers by its tool alone.
        route.dropped(&TurnRoute::default());
        route.answered(
            2,
            &TurnRoute {
                transitions: vec![],
                tools: vec!["propose_payment_plan".to_owned()],
            },
            "Done: 22 dollars a month for 20 months.",
        );
        assert_eq!(route.resumed_turns, 2);
        assert_eq!(route.wrong, None);
    }

    #[test]
    fn a_turn_sent_again_may_be_redone_where_it_began_or_go_on_from_where_it_got() {
        for answer in [
            moved(Some("intake"), "verify", "find_account"),
            TurnRoute {
                transitions: vec![],
                tools: vec![],
            },
        ] {
            let mut route = Route::default();
            // The drop came after the move was told but before the turn's end.
            route.dropped(&moved(Some("intake"), "verify", "find_account"));
            let words = if answer.tools.is_empty() {
                "Could you tell me your date of birth, year first?"
            } else {
                "Thanks, Jordan Lee."
            };
            route.answered(0, &answer, words);
            assert_eq!(route.wrong, None, "{answer:?}");
        }
    }

    #[test]
    fn a_call_that_starts_over_after_a_reconnect_is_in_the_wrong_sub_agent() {
        let mut route = Route::default();
        route.answered(0, &moved(Some("intake"), "verify", "find_account"), "");
        route.answered(1, &moved(Some("verify"), "resolve", "verify_identity"), "");
        route.dropped(&TurnRoute::default());
        // A fresh router: it logs its start, and intake reads the amount as an account.
        let mut fresh = TurnRoute {
            transitions: vec![(None, "intake".to_owned())],
            tools: vec!["find_account".to_owned()],
        };
        route.answered(2, &fresh, "Sorry, I couldn't do that. No account 22.");
        assert_eq!(
            route.wrong,
            Some(WrongSubAgent {
                turn: 2,
                expected: vec!["resolve".to_owned()],
                answered: Some("intake".to_owned()),
            })
        );
        // Nothing that tells the sub-agent is no proof of the right one.
        let mut unknown = Route::default();
        unknown.dropped(&TurnRoute::default());
        fresh.transitions.clear();
        fresh.tools.clear();
        unknown.answered(0, &fresh, "Sorry, I lost track.");
        assert_eq!(unknown.wrong.map(|w| w.answered), Some(None));
    }
}
