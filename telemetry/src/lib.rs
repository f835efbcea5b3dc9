//! Scraping, time series, baselines and golden-signal rules that build the lab's snapshot.
