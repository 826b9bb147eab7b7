//! Prompt rendering for a loaded GGUF model (part of `llama`): the natively used Jinja
//! template when the model's template supports tools in a recognised format, else
//! llama.cpp's built-in template matcher with the generic tool prompt.

use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate};
use llama_cpp_2::token::LlamaToken;

use super::{LlamaEngineModel, FALLBACK_TEMPLATE};
use crate::chat_template::ChatTemplate;
use crate::error::{InferenceError, Result};
use crate::generate::{GenerateRequest, Message};
use crate::llama::tools::{self, ToolPlan};
use crate::tool_formats::{self, ToolFormat};
use crate::tools::ToolSpec;

impl LlamaEngineModel {
    /// This model with `source` as its chat template instead of the GGUF's (for a GGUF
    /// whose template is missing or wrong; tests use it to run a tools-aware template on a
    /// small model). The same rules apply to it as to a GGUF's template.
    pub fn with_chat_template(mut self, source: &str) -> Self {
        self.template = LlamaChatTemplate::new(source).ok();
        self.native = self.native_template(source);
        self
    }

    /// How tools reach this model (`Generic` unless its template is used natively).
    pub(crate) fn tool_format(&self) -> ToolFormat {
        self.native
            .as_ref()
            .map_or(ToolFormat::Generic, |(_, f)| *f)
    }

    pub(super) fn native_template(&self, source: &str) -> Option<(ChatTemplate, ToolFormat)> {
        let vocab = self.core.model.vocab();
        let text = |token: LlamaToken| {
            if token.0 < 0 || token.0 >= self.core.model.n_vocab() {
                return String::new();
            }
            vocab
                .text(token)
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        tool_formats::native_template(source, &text(vocab.bos()), &text(vocab.eos()))
    }

    /// Renders a conversation with the model's chat template, ending with the assistant's
    /// opening tag: through minijinja when the template is used natively (see the module
    /// docs), else as [`Self::render_generic`] does.
    pub fn render(&self, conversation: &[Message]) -> Result<String> {
        match self.render_native(conversation, None) {
            Some(text) => Ok(text),
            None => self.render_generic(conversation),
        }
    }

    /// The conversation (and `tools`) through the natively used template; `None` when
    /// there is none or it failed (logged).
    fn render_native(
        &self,
        conversation: &[Message],
        tools: Option<&[ToolSpec]>,
    ) -> Option<String> {
        let (template, format) = self.native.as_ref()?;
        match template.render(&format.prepare(conversation), tools, true) {
            Ok(text) => {
                // The tokenizer adds BOS itself when the vocabulary asks for it.
                let bos = template.bos();
                match text.strip_prefix(bos) {
                    Some(rest) if !bos.is_empty() && self.core.model.vocab().should_add_bos() => {
                        Some(rest.to_owned())
                    }
                    _ => Some(text),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the model's chat template failed to render; using llama.cpp's template matcher and the generic tool prompt");
                None
            }
        }
    }

    /// Renders with llama.cpp's built-in template matcher (ChatML if the model has no
    /// template or llama.cpp does not recognise it). Tool calls and tool results are
    /// rendered as plain text turns (`tools::plain_turns`).
    pub fn render_generic(&self, conversation: &[Message]) -> Result<String> {
        let chat = crate::tools::plain_turns(conversation)
            .into_iter()
            .map(|(role, content)| LlamaChatMessage::new(role, content))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| InferenceError::invalid("messages", format!("{e}")))?;
        if let Some(t) = &self.template {
            match self.core.model.apply_chat_template(t, &chat, true) {
                Ok(s) => return Ok(s),
                Err(e) => tracing::warn!(error = %e, "model chat template failed, using chatml"),
            }
        }
        let fallback = LlamaChatTemplate::new(FALLBACK_TEMPLATE)
            .map_err(|e| InferenceError::Engine(format!("chat template: {e}")))?;
        self.core
            .model
            .apply_chat_template(&fallback, &chat, true)
            .map_err(|e| InferenceError::Engine(format!("chat template: {e}")))
    }

    /// The request's tool plan, if it has tools, and its rendered prompt: through the
    /// native template with the tools, or generically with the tool prompt added to the
    /// conversation first.
    pub(crate) fn prompt_for(
        &self,
        request: &GenerateRequest,
    ) -> Result<(Option<ToolPlan>, String)> {
        let mut conversation = request.conversation()?;
        let tools = request.uses_tools().then_some(request.tools.as_slice());
        if let Some(prompt) = self.render_native(&conversation, tools) {
            return Ok((ToolPlan::for_request(request, self.tool_format()), prompt));
        }
        let plan = ToolPlan::for_request(request, ToolFormat::Generic);
        if let Some(p) = &plan {
            conversation = tools::with_tool_prompt(conversation, &p.prompt);
        }
        let prompt = self.render_generic(&conversation)?;
        Ok((plan, prompt))
    }
}
