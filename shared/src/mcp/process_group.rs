//! A stdio server's process group ends with its leader. The group (`ProcessGroup::leader`)
//! is killed whole when the session kills the command, but a session that ends gracefully
//! closes stdin and waits: a wrapper (`npx`, `uvx`, a shell) that exits on its own then left
//! everything it started running. So whenever the leader is waited for, the group is killed
//! first, while the leader is still unreaped: its id cannot have been reused by then.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};

/// Wraps the group leader's child (after `ProcessGroup::leader()`).
#[derive(Debug)]
pub struct EndGroupWithLeader;

impl CommandWrapper for EndGroupWithLeader {
    fn wrap_child(&mut self, inner: Box<dyn ChildWrapper>, _core: &CommandWrap) -> io::Result<Box<dyn ChildWrapper>> {
        Ok(Box::new(Leader { inner, reaped: false }))
    }
}

#[derive(Debug)]
struct Leader {
    inner: Box<dyn ChildWrapper>,
    /// Reaped through this wrapper: its id may name another process from then on (the inner
    /// group wrapper reaps with a `waitpid` tokio does not see, so `id()` still answers).
    reaped: bool,
}

/// How often a wait looks whether the leader has exited. Polled rather than waited for on a
/// blocking thread: a runtime shutting down waits for its blocking threads, and one waiting
/// for a leader that never exits held the process's exit forever.
const POLL: Duration = Duration::from_millis(20);

impl ChildWrapper for Leader {
    fn inner(&self) -> &dyn ChildWrapper {
        self.inner.as_ref()
    }

    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self.inner.as_mut()
    }

    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self.inner
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(async move {
            if let Some(pid) = self.leader() {
                let mut state = leader_state(pid);
                while state == LeaderState::Running {
                    tokio::time::sleep(POLL).await;
                    state = leader_state(pid);
                }
                if state == LeaderState::Exited {
                    kill_group(pid);
                }
            }
            let status = self.inner.wait().await;
            self.reaped = true;
            status
        })
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(pid) = self.leader() {
            if leader_state(pid) == LeaderState::Exited {
                kill_group(pid);
            }
        }
        let status = self.inner.try_wait()?;
        self.reaped |= status.is_some();
        Ok(status)
    }
}

impl Leader {
    /// The leader's id while it is not reaped (and so still its own).
    fn leader(&self) -> Option<u32> {
        self.inner.id().filter(|_| !self.reaped)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaderState {
    Running,
    /// Exited and not reaped: its id is still its own, and its group's.
    Exited,
    /// Not a child of ours any more (reaped elsewhere): its id may name anything now.
    Gone,
}

/// The leader's state, looked at without reaping it (`WNOWAIT`).
fn leader_state(pid: u32) -> LeaderState {
    loop {
        // SAFETY: `info` is a plain C struct waitid fills in; zeroed is a valid value of it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOWAIT | libc::WNOHANG;
        // SAFETY: waitid only writes into `info`, which lives across the call.
        let done = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
        if done == 0 {
            // With the child still running, waitid succeeds and leaves the pid zero.
            // SAFETY: the kernel filled `info` in (or left it zeroed) for this waitid.
            return match unsafe { info.si_pid() } {
                0 => LeaderState::Running,
                _ => LeaderState::Exited,
            };
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return LeaderState::Gone;
        }
    }
}

fn kill_group(pgid: u32) {
    // SAFETY: killpg only sends a signal; a group already gone answers ESRCH.
    unsafe {
        libc::killpg(pgid as libc::pid_t, libc::SIGKILL);
    }
}
