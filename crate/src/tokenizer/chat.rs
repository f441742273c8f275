//! Chat templates: `tokenizer.chat_template` (a Jinja template written for Python's
//! `jinja2`, as `transformers` runs it) rendered with minijinja.
//!
//! The environment mirrors `transformers`' `apply_chat_template`: `trim_blocks` and
//! `lstrip_blocks` on, loop controls, Python string methods (`.strip()`, `.startswith()`, ...)
//! through minijinja-contrib's pycompat, a `raise_exception(message)` global, and the
//! `messages`, `add_generation_prompt`, `bos_token`, `eos_token` and (for a template that presents
//! tools itself) `tools` variables, and a `tojson` filter that writes JSON as Python's
//! `json.dumps` does (`", "` and `": "` separators, keys in their order, nothing escaped for HTML),
//! since the models were trained on that text.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde};
use minijinja::{Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};

use super::TokenizerError;
use crate::gguf::{GgufHeader, MetaValue};

const TEMPLATE_NAME: &str = "tokenizer.chat_template";

/// One chat message (`{"role": "user", "content": "..."}`), with an assistant's calls in
/// OpenAI's shape (arguments as objects) for a template that renders calls itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into(), tool_calls: None }
    }
}

/// What a chat template renders: the messages, and the tools (OpenAI's objects) where the
/// template presents them itself (empty: its `tools` variable is left undefined).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    pub messages: Vec<Message>,
    pub tools: Vec<serde_json::Value>,
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Self {
        Self { messages, tools: Vec::new() }
    }
}

/// A compiled chat template with the model's BOS/EOS token texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    source: String,
    renders_tools: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// The error `raise_exception` returns, found again in the render error's sources so that
/// a template's own refusal reads differently from a template bug.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Raised(String);

impl ChatTemplate {
    /// The model's chat template, `None` when the file has none.
    pub fn from_gguf(f: &GgufHeader) -> Result<Option<Self>, TokenizerError> {
        let Some(value) = f.get(TEMPLATE_NAME) else { return Ok(None) };
        let source = value
            .as_str()
            .ok_or(TokenizerError::Metadata { key: "tokenizer.chat_template", expected: "a string" })?;
        let token_text = |key| -> Option<String> {
            let id = f.get(key).and_then(MetaValue::as_u64)?;
            let tokens = f.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array)?;
            Some(tokens.get(usize::try_from(id).ok()?)?.as_str()?.to_string())
        };
        let bos = token_text("tokenizer.ggml.bos_token_id").unwrap_or_default();
        let eos = token_text("tokenizer.ggml.eos_token_id").unwrap_or_default();
        Self::new(source, bos, eos).map(Some)
    }

    /// Compiles `source`; a syntax error names the line at fault.
    pub fn new(source: &str, bos_token: String, eos_token: String) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TokenizerError::TemplateSyntax(e.to_string()))?;
        env.set_syntax(syntax);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", python_json);
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, "raise_exception called").with_source(Raised(message)))
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| TokenizerError::TemplateSyntax(describe(&e)))?;
        let renders_tools = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TokenizerError::TemplateSyntax(describe(&e)))?
            .undeclared_variables(false)
            .contains("tools");
        Ok(Self { env, bos_token, eos_token, source: source.to_string(), renders_tools })
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template reads a `tools` variable (presents tools itself).
    pub fn renders_tools(&self) -> bool {
        self.renders_tools
    }

    /// The prompt text for `messages`; `add_generation_prompt` appends the opening of the
    /// assistant's turn.
    pub fn render(&self, chat: &Conversation, add_generation_prompt: bool) -> Result<String, TokenizerError> {
        let template =
            self.env.get_template(TEMPLATE_NAME).map_err(|e| TokenizerError::TemplateRender(describe(&e)))?;
        let messages: Value = chat.messages.iter().map(|m| Value::from(Serde(m))).collect();
        let tools = if chat.tools.is_empty() { Value::UNDEFINED } else { Value::from(Serde(&chat.tools)) };
        let context = minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        template.render(context).map_err(|e| match raised_message(&e) {
            Some(message) => TokenizerError::TemplateRaised(message),
            None => TokenizerError::TemplateRender(describe(&e)),
        })
    }
}

/// transformers' `tojson`: Python's `json.dumps` with `ensure_ascii=False`, compact with
/// `", "` and `": "`, or indented by `indent` spaces.
fn python_json(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let spaces = vec![b' '; n];
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(&spaces)))
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, PythonSeparators)),
    };
    written.map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from_safe_string(String::from_utf8_lossy(&out).into_owned()))
}

/// `json.dumps`' default separators.
struct PythonSeparators;

impl serde_json::ser::Formatter for PythonSeparators {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

fn raised_message(e: &Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(raised) = s.downcast_ref::<Raised>() {
            return Some(raised.0.clone());
        }
        source = s.source();
    }
    None
}

/// The error with its line, and any errors it wraps.
fn describe(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(source: &str) -> ChatTemplate {
        ChatTemplate::new(source, "<s>".into(), "</s>".into()).unwrap()
    }

    #[test]
    fn python_string_methods_and_special_variables() {
        let t = template("{{ bos_token }}{% for m in messages %}{{ m.role.upper() }}:{{ m['content'].strip() }}\n{% endfor %}{{ eos_token }}");
        let out = t.render(&vec![Message::new("user", "  hi  ")].into(), false).unwrap();
        assert_eq!(out, "<s>USER:hi\n</s>");
    }

    #[test]
    fn trim_and_lstrip_blocks_as_transformers() {
        let t = template("{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}");
        assert_eq!(t.render(&vec![Message::new("user", "a")].into(), false).unwrap(), "[a]\n");
    }

    #[test]
    fn raise_exception_is_a_clear_error() {
        let t = template("{% if messages[0].role != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}");
        let err = t.render(&vec![Message::new("user", "x")].into(), false).unwrap_err();
        assert_eq!(err, TokenizerError::TemplateRaised("first message must be system".into()));
    }

    #[test]
    fn syntax_errors_name_the_template_and_line() {
        let err = ChatTemplate::new("ok\n{% for m in messages %}{{ m.content }", String::new(), String::new()).unwrap_err();
        let TokenizerError::TemplateSyntax(text) = &err else { panic!("{err:?}") };
        assert!(text.contains("tokenizer.chat_template:2"), "{text}");
    }

    #[test]
    fn messages_round_trip_through_json() {
        let m: Message = serde_json::from_str(r#"{"role":"user","content":"hi"}"#).unwrap();
        assert_eq!(m, Message::new("user", "hi"));
    }
}
