//! The store's Lua scripts: each update of a task is one script, so it is atomic across
//! replicas. Every script starts with a prelude (for tasks `prelude.lua`: arguments, clock,
//! keys, bookkeeping).

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
    USAGE => "usage.lua",
}
