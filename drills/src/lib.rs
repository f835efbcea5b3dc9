//! Replayable fault drills that pass only when the job's own signals recover.
