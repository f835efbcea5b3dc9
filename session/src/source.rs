//! The runtime as telemetry reads it: the three calls the driver makes, with the runtime's own errors.
//! The façade's driver and its `watch` example both read a lab through it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lab_model::scrape::ScrapeTarget;
use lab_model::status::{LabStatus, RuntimeKind};
use lab_runtime::Runtime;
use lab_telemetry::{Source, SourceError};

/// A [`Runtime`] as a telemetry [`Source`].
#[derive(Debug, Clone)]
pub struct RuntimeSource(pub Arc<dyn Runtime>);

#[async_trait]
impl Source for RuntimeSource {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn kind(&self) -> RuntimeKind {
        self.0.kind()
    }

    async fn status(&self) -> Result<LabStatus, SourceError> {
        Ok(self.0.status().await?)
    }

    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>, SourceError> {
        Ok(self.0.scrape_targets().await?)
    }

    async fn fetch_metrics(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String, SourceError> {
        Ok(self.0.fetch_metrics(target, timeout).await?)
    }
}
