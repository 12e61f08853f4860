//! Square: `x-square-hmacsha256-signature: <base64>`, HMAC-SHA256 over the
//! notification URL (as registered with Square, which is the URL it
//! called) followed by the body. Key: the subscription's signature key
//! verbatim. No timestamp is signed.

use super::{Reason, Request, Signed};
use crate::signature::{decode_base64, Algorithm};

pub const SIGNATURE: &str = "x-square-hmacsha256-signature";

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let digest =
        decode_base64(request.headers.get(SIGNATURE)?, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest]).prefix(request.url()?))
}
