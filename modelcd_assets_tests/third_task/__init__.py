"""A third kind of model that lives only in the tests: a regression head (a ticket's urgency score) on an encoder, judged by
paired absolute error. It declares itself through the public task API (lib/tasks/names.declare_task) and is found as a
plugin is, through MODELCD_TASK_MODULES; no file of modelcd_assets names it."""
