//! Request headers as the handler passes them: a JSON object of strings,
//! looked up case-insensitively, as HTTP header names are.
//!
//! Headers come from the network, so reading them is linear in their size
//! and bounded: past `MAX_HEADERS` names the request is refused as
//! malformed before anything else is done with it.

use super::Reason;
use std::collections::HashMap;

/// Longest header value accepted; real signature headers are a few hundred
/// bytes, and a megabyte of "signature" is an attack, not a delivery.
pub const MAX_HEADER_BYTES: usize = 8192;

/// Most header names accepted. HTTP servers stop far earlier (nginx and
/// Node.js at a few kilobytes of headers, or 2,000 lines); a webhook
/// carries a few dozen.
pub const MAX_HEADERS: usize = 1000;

enum Entry<'a> {
    Value(&'a str),
    /// Sent as a number, array, object…: unusable if the scheme needs it,
    /// harmless otherwise.
    NotAString,
    /// The same name twice in different case ("Stripe-Signature" and
    /// "stripe-signature"): which one was signed? Refuse to guess.
    Ambiguous,
}

pub struct Headers<'a> {
    /// Keyed by the lower-cased name.
    entries: HashMap<String, Entry<'a>>,
}

impl<'a> Headers<'a> {
    pub fn from_json(value: &'a serde_json::Value) -> Result<Self, Reason> {
        let object = value.as_object().ok_or(Reason::MalformedHeader)?;
        if object.len() > MAX_HEADERS {
            return Err(Reason::MalformedHeader);
        }
        let mut entries = HashMap::with_capacity(object.len());
        for (name, value) in object {
            crate::input::check_for_interrupts();
            let entry = match value.as_str() {
                Some(text) => Entry::Value(text),
                None => Entry::NotAString,
            };
            entries
                .entry(name.to_ascii_lowercase())
                .and_modify(|existing| *existing = Entry::Ambiguous)
                .or_insert(entry);
        }
        Ok(Headers { entries })
    }

    fn entry(&self, name: &str) -> Option<&Entry<'a>> {
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            self.entries.get(&name.to_ascii_lowercase())
        } else {
            self.entries.get(name)
        }
    }

    /// The trimmed value of a header, `Err(MissingHeader)` if absent,
    /// `Err(MalformedHeader)` if present but unusable.
    pub fn get(&self, name: &str) -> Result<&'a str, Reason> {
        match self.entry(name) {
            None => Err(Reason::MissingHeader),
            Some(Entry::Value(v)) if v.len() <= MAX_HEADER_BYTES => Ok(v.trim()),
            Some(_) => Err(Reason::MalformedHeader),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.entry(name).is_some()
    }
}
