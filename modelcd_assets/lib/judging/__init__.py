"""Judgement: gate verdicts, the statistics behind them, drift, the I/O contract, SLOs, artifact safety, promotion's second lock, and the
policy that sets their thresholds."""
