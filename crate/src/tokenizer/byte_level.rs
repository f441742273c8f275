//! GPT-2's byte-level alphabet: each of the 256 byte values is written as one printable
//! character in BPE vocabularies (space is `Ġ`, newline `Ċ`). Printable Latin-1 bytes stand
//! for themselves; the other 68 take U+0100 onwards, in byte order.
//! See https://github.com/openai/gpt-2/blob/master/src/encoder.py (`bytes_to_unicode`).

/// Bytes that are written as the character of the same code point.
const fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// How many bytes are not self-mapped; they take U+0100 .. U+0100 + this.
const N_SHIFTED: usize = 68;

/// Characters U+0000 .. U+0144 (the alphabet's span) to the byte each stands for, or -1.
const CHAR_TO_BYTE: [i16; 256 + N_SHIFTED] = {
    let mut table = [-1i16; 256 + N_SHIFTED];
    let mut n = 0;
    let mut b = 0;
    while b < 256 {
        if is_self_mapped(b as u8) {
            table[b] = b as i16;
        } else {
            table[256 + n] = b as i16;
            n += 1;
        }
        b += 1;
    }
    table
};

/// The byte a vocabulary character stands for, or `None` for a character outside the
/// alphabet.
/// The character that stands for byte `b` in a vocabulary.
pub(crate) fn byte_to_char(b: u8) -> char {
    if is_self_mapped(b) {
        return b as char;
    }
    let shifted = (0..b).filter(|&x| !is_self_mapped(x)).count() as u32;
    char::from_u32(0x100 + shifted).expect("U+0100..U+0144 are characters")
}

pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let b = *CHAR_TO_BYTE.get(u32::from(c) as usize)?;
    u8::try_from(b).ok()
}

/// The bytes a byte-level token string stands for. Characters outside the alphabet (which
/// a well-formed vocabulary never has) are kept as their own UTF-8.
pub(crate) fn token_text_to_bytes(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_characters() {
        assert_eq!(char_to_byte('Ġ'), Some(b' '));
        assert_eq!(char_to_byte('Ċ'), Some(b'\n'));
        assert_eq!(char_to_byte('ĉ'), Some(b'\t'));
        assert_eq!(char_to_byte('A'), Some(b'A'));
        assert_eq!(char_to_byte('Ā'), Some(0));
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(char_to_byte('好'), None);
    }

    #[test]
    fn the_alphabet_covers_every_byte_once() {
        let mut seen = [false; 256];
        for code in 0..512u32 {
            if let Some(b) = char::from_u32(code).and_then(char_to_byte) {
                assert!(!seen[b as usize], "byte {b} mapped twice");
                seen[b as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
    }
}
