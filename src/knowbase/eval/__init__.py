"""Retrieval evaluation: judged sets, metrics, sweeps, BEIR import, shadow vectors."""
