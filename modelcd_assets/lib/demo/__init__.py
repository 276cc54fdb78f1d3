"""Demo tooling: the reproducible support-ticket data the demo, the benches and the tests train and judge on (tickets), and the
demo's fine-tuning recipes (recipes)."""
