//! [`CrewSetup`]: what builds each call's crew from its handshake.

use std::future::Future;

use futures::{FutureExt, future::BoxFuture};

use crate::{Agent, Crew, SessionSetup};

/// Any error a crew's setup returns: the platform sees it as a rejected handshake.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Builds each call's crew from its handshake: what a crew server runs once per call.
///
/// Implemented for an [`Agent`] (every call gets a crew of that agent alone) and for
/// functions and closures taking the call's [`SessionSetup`] and returning any of:
/// a [`Crew`], a `Result<Crew, E>`, or a future of either; or taking `&SessionSetup` and
/// returning a [`Crew`] or a `Result<Crew, E>`. `M` only tells those apart;
/// it is inferred, never written: a function that returns a setup returns `impl CrewSetup`
/// (an agent, a type of your own, or a closure returning a [`Crew`]).
///
/// # Examples
///
/// ```
/// use crewline::{Crew, session::CrewSetup, SessionSetup};
///
/// fn setup(call: SessionSetup) -> Crew {
///     let _ = call.initial_variables();
///     Crew::new()
/// }
///
/// async fn fallible(call: SessionSetup) -> Result<Crew, std::io::Error> {
///     Ok(setup(call))
/// }
///
/// fn takes<M>(_setup: impl CrewSetup<M>) {}
/// fn borrowing(_call: &SessionSetup) -> Result<Crew, std::io::Error> {
///     Ok(Crew::new())
/// }
///
/// takes(setup);
/// takes(fallible);
/// takes(borrowing);
/// takes(|_call: SessionSetup| Crew::new());
///
/// // A function that returns a setup names no closure type.
/// fn greeter(greeting: &'static str) -> impl CrewSetup {
///     move |_call: SessionSetup| {
///         let _ = greeting;
///         Crew::new()
///     }
/// }
/// takes(greeter("Hello!"));
/// ```
pub trait CrewSetup<M = ()>: Send + Sync + 'static {
    /// The crew for the call whose handshake is `session`, or why there is none.
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>>;
}

/// The markers that tell [`CrewSetup`]'s implementations apart (an agent, a type of your own
/// and a function returning a [`Crew`](crate::Crew) use the default, `()`).
#[doc(hidden)]
pub mod marker {
    /// A function returning `Result<Crew, E>`.
    #[derive(Debug)]
    pub enum ReturnsResult {}
    /// A function returning a future of a [`Crew`](crate::Crew).
    #[derive(Debug)]
    pub enum AsyncCrew {}
    /// A function returning a future of `Result<Crew, E>`.
    #[derive(Debug)]
    pub enum AsyncResult {}
    /// A function of `&SessionSetup` returning a [`Crew`](crate::Crew).
    #[derive(Debug)]
    pub enum BorrowsCrew {}
    /// A function of `&SessionSetup` returning `Result<Crew, E>`.
    #[derive(Debug)]
    pub enum BorrowsResult {}
}

impl CrewSetup for Agent {
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        std::future::ready(Ok(self.crew_for(&session))).boxed()
    }
}

impl<F> CrewSetup for F
where
    F: Fn(SessionSetup) -> Crew + Send + Sync + 'static,
{
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        std::future::ready(Ok(self(session))).boxed()
    }
}

impl<F, E> CrewSetup<marker::ReturnsResult> for F
where
    F: Fn(SessionSetup) -> Result<Crew, E> + Send + Sync + 'static,
    E: Into<BoxError>,
{
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        std::future::ready(self(session).map_err(Into::into)).boxed()
    }
}

impl<F, Fut> CrewSetup<marker::AsyncCrew> for F
where
    F: Fn(SessionSetup) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Crew> + Send + 'static,
{
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        self(session).map(Ok).boxed()
    }
}

impl<F, Fut, E> CrewSetup<marker::AsyncResult> for F
where
    F: Fn(SessionSetup) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Crew, E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        self(session).map(|crew| crew.map_err(Into::into)).boxed()
    }
}

impl<F> CrewSetup<marker::BorrowsCrew> for F
where
    F: Fn(&SessionSetup) -> Crew + Send + Sync + 'static,
{
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        std::future::ready(Ok(self(&session))).boxed()
    }
}

impl<F, E> CrewSetup<marker::BorrowsResult> for F
where
    F: Fn(&SessionSetup) -> Result<Crew, E> + Send + Sync + 'static,
    E: Into<BoxError>,
{
    fn setup(&self, session: SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> {
        std::future::ready(self(&session).map_err(Into::into)).boxed()
    }
}
