//! Request headers as the handler passes them: a JSON object of strings,
//! looked up case-insensitively, as HTTP header names are.

use super::Reason;

/// Longest header value accepted; real signature headers are a few hundred
/// bytes, and a megabyte of "signature" is an attack, not a delivery.
pub const MAX_HEADER_BYTES: usize = 8192;

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
    entries: Vec<(String, Entry<'a>)>,
}

impl<'a> Headers<'a> {
    pub fn from_json(value: &'a serde_json::Value) -> Result<Self, Reason> {
        let object = value.as_object().ok_or(Reason::MalformedHeader)?;
        let mut entries: Vec<(String, Entry<'a>)> = Vec::with_capacity(object.len());
        for (name, value) in object {
            let lower = name.to_ascii_lowercase();
            let entry = match value.as_str() {
                Some(text) => Entry::Value(text),
                None => Entry::NotAString,
            };
            match entries.iter_mut().find(|(n, _)| *n == lower) {
                Some((_, existing)) => *existing = Entry::Ambiguous,
                None => entries.push((lower, entry)),
            }
        }
        Ok(Headers { entries })
    }

    /// The trimmed value of a header, `Err(MissingHeader)` if absent,
    /// `Err(MalformedHeader)` if present but unusable.
    pub fn get(&self, name: &str) -> Result<&'a str, Reason> {
        match self
            .entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            None => Err(Reason::MissingHeader),
            Some((_, Entry::Value(v))) if v.len() <= MAX_HEADER_BYTES => Ok(v.trim()),
            Some(_) => Err(Reason::MalformedHeader),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.entries
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}
