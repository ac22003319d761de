//! Agents, their conversations and chat.

pub mod owner;

pub use owner::Owner;
