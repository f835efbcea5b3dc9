//! Small HTTP calls on loopback with a deadline: readiness probes, metrics, the proxy's control API.

use std::sync::OnceLock;
use std::time::Duration;

use lab_runtime::{Result, RuntimeError};

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        // Loopback only: never route through a proxy from the environment.
        reqwest::Client::builder()
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default()
    })
}

/// GETs `url` within `timeout`, returning the status code and the body.
///
/// # Errors
/// [`RuntimeError::Other`] when the server does not answer in time or the connection fails.
pub async fn get(url: &str, timeout: Duration) -> Result<(u16, String)> {
    let fut = async {
        let r = client().get(url).send().await?;
        let code = r.status().as_u16();
        Ok::<_, reqwest::Error>((code, r.text().await?))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(RuntimeError::Other(format!("GET {url}: {e}"))),
        Err(_) => Err(RuntimeError::Timeout {
            what: format!("GET {url}"),
            seconds: timeout.as_secs_f64(),
        }),
    }
}

/// POSTs an empty body to `url` within `timeout`, returning the status code and the body.
///
/// # Errors
/// [`RuntimeError::Other`] when the server does not answer in time or the connection fails.
pub async fn post(url: &str, timeout: Duration) -> Result<(u16, String)> {
    let fut = async {
        let r = client().post(url).send().await?;
        let code = r.status().as_u16();
        Ok::<_, reqwest::Error>((code, r.text().await?))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(RuntimeError::Other(format!("POST {url}: {e}"))),
        Err(_) => Err(RuntimeError::Timeout {
            what: format!("POST {url}"),
            seconds: timeout.as_secs_f64(),
        }),
    }
}

/// PUTs a JSON `body` to `url` within `timeout`; a status other than 2xx is an error carrying the body.
///
/// # Errors
/// [`RuntimeError::Other`] on failure, timeout or refusal.
pub async fn put(url: &str, body: String, timeout: Duration) -> Result<String> {
    let fut = async {
        let r = client()
            .put(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let code = r.status();
        Ok::<_, reqwest::Error>((code, r.text().await?))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok((code, text))) if code.is_success() => Ok(text),
        Ok(Ok((code, text))) => Err(RuntimeError::Other(format!("PUT {url}: {code}: {}", text.trim()))),
        Ok(Err(e)) => Err(RuntimeError::Other(format!("PUT {url}: {e}"))),
        Err(_) => Err(RuntimeError::Timeout {
            what: format!("PUT {url}"),
            seconds: timeout.as_secs_f64(),
        }),
    }
}
