//! Chat templates (`car_inference::chat_template`), which come from a model file and so
//! are hostile input: any source compiles or errors, and rendering a conversation through
//! it ends (an error or a string), never a panic or a hang.
#![no_main]

use car_inference::chat_template::ChatTemplate;
use car_inference::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(template) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let conversation = [
        Message::new("system", "be brief"),
        Message::new("user", "hello"),
        Message::new("assistant", "hi"),
    ];
    let _ = template.render(&conversation, None, true);
});
