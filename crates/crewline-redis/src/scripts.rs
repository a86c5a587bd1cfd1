//! The Lua scripts: each update of a task, or of a deferred approval, is one script, so it is
//! atomic across replicas. Every task script starts with `prelude.lua` (arguments, clock, keys,
//! bookkeeping), every approval script with `approval/prelude.lua`, every claim script with
//! `claims/prelude.lua`.

use std::sync::LazyLock;

use redis::Script;

macro_rules! scripts {
    (prelude $prelude:literal; $($name:ident => $file:literal),* $(,)?) => {
        $(
            pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
                Script::new(concat!(
                    include_str!(concat!("lua/", $prelude)),
                    "\n",
                    include_str!(concat!("lua/", $file))
                ))
            });
        )*
    };
}

scripts! {
    prelude "prelude.lua";
    CREATE => "create.lua",
    GET => "get.lua",
    ATTACH => "attach.lua",
    FINISH => "finish.lua",
    EMIT => "emit.lua",
    POLL => "poll.lua",
    ANSWER => "answer.lua",
    TAKE => "take.lua",
    ABANDON => "abandon.lua",
    WITHDRAW => "withdraw.lua",
    RENEW => "renew.lua",
    USAGE => "usage.lua",
}

scripts! {
    prelude "approval/prelude.lua";
    APPROVAL_REQUEST => "approval/request.lua",
    APPROVAL_TAKE => "approval/take.lua",
    APPROVAL_DECIDE => "approval/decide.lua",
    APPROVAL_PENDING => "approval/pending.lua",
}

scripts! {
    prelude "claims/prelude.lua";
    CLAIM => "claims/claim.lua",
    CLAIM_RENEW => "claims/renew.lua",
    CLAIM_SETTLE => "claims/settle.lua",
}
