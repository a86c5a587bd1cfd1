//! The terminal's echo off while a chat reply streams: a line typed then would be echoed by
//! the terminal at the cursor, inside the agent's line; with echo off it shows only when sent,
//! as a `you>` line of its own. Line editing (canonical mode) and Ctrl-C are kept.

#[cfg(unix)]
mod imp {
    use std::os::fd::AsFd;

    use nix::sys::termios::{LocalFlags, SetArg, Termios, tcgetattr, tcsetattr};

    /// Keeps a terminal's echo off until dropped; on what is not a terminal, does nothing.
    #[derive(Debug)]
    pub struct EchoOff<F: AsFd> {
        fd: F,
        /// The settings to put back; `None` when nothing was changed.
        saved: Option<Termios>,
    }

    impl<F: AsFd> EchoOff<F> {
        /// Turns echo off on `fd` if it is a terminal with echo on.
        pub fn new(fd: F) -> Self {
            let saved = tcgetattr(fd.as_fd()).ok().and_then(|saved| {
                if !saved.local_flags.contains(LocalFlags::ECHO) {
                    return None;
                }
                let mut quiet = saved.clone();
                quiet.local_flags.remove(LocalFlags::ECHO);
                tcsetattr(fd.as_fd(), SetArg::TCSANOW, &quiet).ok()?;
                Some(saved)
            });
            Self { fd, saved }
        }

        /// Whether echo was turned off (and is put back on drop).
        pub fn is_active(&self) -> bool {
            self.saved.is_some()
        }
    }

    impl<F: AsFd> Drop for EchoOff<F> {
        fn drop(&mut self) {
            if let Some(saved) = self.saved.take() {
                // Nothing to do on failure: the terminal is gone.
                let _ = tcsetattr(self.fd.as_fd(), SetArg::TCSANOW, &saved);
            }
        }
    }

    /// On Ctrl-C, puts stdin's terminal settings as they are now back before the process
    /// ends (exit status 130, as the default signal gives a shell): a Ctrl-C during a reply
    /// must not leave the terminal without echo.
    pub fn restore_on_ctrl_c() {
        let Ok(saved) = tcgetattr(std::io::stdin().as_fd()) else {
            return;
        };
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &saved);
                std::process::exit(130);
            }
        });
    }

    #[cfg(test)]
    mod tests {
        use nix::pty::openpty;

        use super::*;

        fn echoes(fd: impl AsFd) -> bool {
            tcgetattr(fd.as_fd())
                .unwrap()
                .local_flags
                .contains(LocalFlags::ECHO)
        }

        #[test]
        fn echo_is_off_while_the_guard_lives_and_back_after() {
            let pty = openpty(None, None).unwrap();
            assert!(echoes(&pty.slave));
            let guard = EchoOff::new(&pty.slave);
            assert!(guard.is_active());
            assert!(!echoes(&pty.slave));
            // Line editing stays: the line still reaches the chat on Enter.
            assert!(
                tcgetattr(&pty.slave)
                    .unwrap()
                    .local_flags
                    .contains(LocalFlags::ICANON)
            );
            drop(guard);
            assert!(echoes(&pty.slave));
        }

        #[test]
        fn a_pipe_is_left_alone() {
            let (reader, _writer) = std::io::pipe().unwrap();
            assert!(!EchoOff::new(&reader).is_active());
        }
    }
}

#[cfg(not(unix))]
mod imp {
    /// Elsewhere than on unix the terminal is left as it is.
    #[derive(Debug)]
    pub struct EchoOff<F>(F);

    impl<F> EchoOff<F> {
        /// Does nothing.
        pub fn new(fd: F) -> Self {
            Self(fd)
        }

        /// Always false.
        pub fn is_active(&self) -> bool {
            false
        }
    }

    /// Does nothing.
    pub fn restore_on_ctrl_c() {}
}

pub use imp::{EchoOff, restore_on_ctrl_c};
