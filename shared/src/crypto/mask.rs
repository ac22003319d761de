//! Masked display of secrets: `****wxyz`.

const STARS: &str = "****";

/// Keeps only the last 4 characters of a secret longer than 8 (enough to tell keys apart),
/// hides shorter ones entirely. The head is not shown: with the tail it gave away 8
/// characters, and a key's prefix is often the guessable part anyway.
pub fn mask_secret(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() <= 8 {
        return STARS.to_owned();
    }
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{STARS}{tail}")
}

/// True when a client sent back a masked value instead of a new secret.
pub fn is_masked(value: &str) -> bool {
    value.contains(STARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(mask_secret("sk-abcdefghwxyz"), "****wxyz");
        assert_eq!(mask_secret("abcdefghi"), "****fghi");
        assert_eq!(mask_secret("abcdefgh"), "****");
        assert_eq!(mask_secret("short"), "****");
        assert!(is_masked(&mask_secret("sk-abcdefghwxyz")));
        assert!(!is_masked("sk-new-key"));
    }
}
