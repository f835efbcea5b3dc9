//! The first look at each line on the wire: a line that is not JSON, or not a JSON-RPC 2.0 message, gets
//! the JSON-RPC error that says so (`-32700` parse error, `-32600` invalid request), with the request's id
//! when it has one, and is recorded as a refused call.

use serde_json::{Value, json};

use super::calls::{Outcome, ToolCall};

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Bad {
    pub code: i64,
    pub message: String,
    pub id: Value,
}

impl Bad {
    /// The JSON-RPC error response.
    pub fn response(&self) -> String {
        json!({"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}})
            .to_string()
    }

    /// The call as the trajectory records it.
    pub fn call(&self, seq: u32, line: &str) -> ToolCall {
        let mut start: String = line.chars().take(200).collect();
        if start.len() < line.len() {
            start.push('…');
        }
        ToolCall {
            seq,
            at_ms: lab_model::clock::now_ms(),
            t_s: None,
            tool: "(malformed)".into(),
            arguments: json!({"line": start}),
            outcome: Outcome::Refused,
            message: Some(self.message.clone()),
            result_bytes: 0,
            duration_ms: 0.0,
            act: None,
        }
    }
}

/// Whether `line` is a JSON-RPC 2.0 message the protocol engine should see. Blank lines pass (they are
/// nothing); a batch (an array) is refused, as MCP has none.
///
/// # Errors
/// What is wrong, as the error to answer with.
pub fn check(line: &str) -> Result<(), Bad> {
    if line.trim().is_empty() {
        return Ok(());
    }
    let v: Value = serde_json::from_str(line).map_err(|e| Bad {
        code: -32700,
        message: format!("parse error: the line is not JSON ({e}); send one JSON-RPC 2.0 message per line"),
        id: Value::Null,
    })?;
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |why: &str| Bad {
        code: -32600,
        message: format!("invalid request: {why}"),
        id: id.clone(),
    };
    let Some(o) = v.as_object() else {
        return Err(invalid("a message is one JSON object (MCP has no batches)"));
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    match (
        o.get("method"),
        o.contains_key("result") || o.contains_key("error"),
    ) {
        (Some(Value::String(_)), _) => {}
        (Some(_), _) => return Err(invalid("\"method\" must be a string")),
        (None, true) if o.contains_key("id") => {}
        (None, _) => return Err(invalid("a request needs a \"method\"")),
    }
    if let Some(p) = o.get("params")
        && !(p.is_object() || p.is_array())
    {
        return Err(invalid("\"params\" must be an object"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_gets_the_error_that_names_it() {
        let e = check("this is not json").unwrap_err();
        assert_eq!((e.code, e.id.clone()), (-32700, Value::Null));
        assert!(e.message.contains("not JSON"));
        assert!(e.response().contains("\"code\":-32700"));
        let e = check(r#"{"id": 7, "method": "tools/list"}"#).unwrap_err();
        assert_eq!((e.code, e.id.clone()), (-32600, json!(7)));
        assert!(
            check(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)
                .unwrap_err()
                .message
                .contains("batches")
        );
        assert!(check(r#"{"jsonrpc":"2.0","id":1,"method":3}"#).is_err());
        assert!(check(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#).is_err());
        check(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        check(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        check(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#).unwrap();
        check("").unwrap();
        let c = e.call(3, &"x".repeat(300));
        assert_eq!((c.seq, c.outcome), (3, Outcome::Refused));
        assert!(c.arguments["line"].as_str().unwrap().ends_with('…'));
    }
}
