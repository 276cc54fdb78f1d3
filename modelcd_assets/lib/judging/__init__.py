"""Judgement: gate verdicts, the statistics behind them, drift, Model SemVer, SLOs, artifact safety, promotion's second lock, and the
policy that sets their thresholds."""
