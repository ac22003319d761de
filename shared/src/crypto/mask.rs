//! Masked display of secrets: `sk-a****wxyz`.

const STARS: &str = "****";

/// Keeps the first 4 and last 4 characters of long secrets, hides short ones entirely.
pub fn mask_secret(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() <= 8 {
        return STARS.to_owned();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{STARS}{tail}")
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
        assert_eq!(mask_secret("sk-abcdefghwxyz"), "sk-a****wxyz");
        assert_eq!(mask_secret("short"), "****");
        assert!(is_masked(&mask_secret("sk-abcdefghwxyz")));
        assert!(!is_masked("sk-new-key"));
    }
}
