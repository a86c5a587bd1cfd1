//! The store's Lua scripts: each update of a task is one script, so it is atomic across
//! replicas. Every script starts with `prelude.lua` (arguments, clock, keys, bookkeeping).

use std::sync::LazyLock;

use redis::Script;

macro_rules! scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("lua/prelude.lua"),
                    "\n",
                    include_str!(concat!("lua/", $file))
                ))
            });
        )*
    };
}

scripts! {
    CREATE => "create.lua",
    GET => "get.lua",
    ATTACH => "attach.lua",
    FINISH => "finish.lua",
    EMIT => "emit.lua",
    POLL => "poll.lua",
    ANSWER => "answer.lua",
    TAKE => "take.lua",
    ABANDON => "abandon.lua",
    USAGE => "usage.lua",
}
