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

/// True when a client sent back a masked value instead of a new secret: the stars with at most
/// four characters after them, as [`mask_secret`] shows, or before them too, as masks showed
/// a key's head once (a client may still hold one). A new secret that merely holds `****`
/// somewhere is a new secret: taken for a mask, it was answered 200 while the old one stayed
/// in force.
pub fn is_masked(value: &str) -> bool {
    value
        .split_once(STARS)
        .is_some_and(|(head, tail)| head.chars().count() <= 4 && tail.chars().count() <= 4)
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
        for mask in ["****", "abcd****wxyz", "sk-****"] {
            assert!(is_masked(mask), "{mask}");
        }
        for secret in ["abc****xyz-new1", "****abcde", "sk-ab****"] {
            assert!(!is_masked(secret), "{secret}");
        }
    }
}
