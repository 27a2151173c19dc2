"""Pure stages: sources → readers → processing → indexing → store. Never writes item status."""
