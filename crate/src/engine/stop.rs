//! Stop strings in streamed text.

/// Holds back text that could be the start of a stop string, so a stop string is never
/// streamed to the user, and detects when one completes.
pub(super) struct StopMatcher {
    stops: Vec<String>,
    text: String,
    emitted: usize,
    stopped: bool,
}

impl StopMatcher {
    pub(super) fn new(stops: Vec<String>) -> Self {
        Self { stops, text: String::new(), emitted: 0, stopped: false }
    }

    /// Appends a piece; returns the text now safe to emit and whether a stop string completed.
    pub(super) fn push(&mut self, piece: &str) -> (String, bool) {
        self.text.push_str(piece);
        for s in self.stops.iter().filter(|s| !s.is_empty()) {
            if let Some(at) = self.text[self.emitted..].find(s.as_str()) {
                let end = self.emitted + at;
                self.text.truncate(end);
                self.stopped = true;
                return (self.take_until(end), true);
            }
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        let hold = self
            .stops
            .iter()
            .flat_map(|s| (1..s.len()).filter(move |&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
            .filter(|p| self.text[self.emitted..].ends_with(p))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let end = self.text.len() - hold;
        (self.take_until(end), false)
    }

    fn take_until(&mut self, end: usize) -> String {
        let s = self.text[self.emitted..end].to_string();
        self.emitted = end;
        s
    }

    pub(super) fn flush(&mut self) -> String {
        self.take_until(self.text.len())
    }

    pub(super) fn stopped(&self) -> bool {
        self.stopped
    }

    pub(super) fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let stops = vec!["\nUser:".to_string()];
        let mut m = StopMatcher::new(stops);
        assert_eq!(m.push("Hello"), ("Hello".into(), false));
        assert_eq!(m.push(" there\nUs"), (" there".into(), false));
        assert_eq!(m.push("er: hi"), ("".into(), true));
        assert_eq!(m.text(), "Hello there");
    }

    #[test]
    fn held_text_that_is_not_a_stop_is_released() {
        let stops = vec!["END".to_string()];
        let mut m = StopMatcher::new(stops);
        assert_eq!(m.push("the E"), ("the ".into(), false));
        assert_eq!(m.push("nd"), ("End".into(), false));
        assert_eq!(m.push(" EN"), (" ".into(), false));
        assert_eq!(m.flush(), "EN");
    }
}
