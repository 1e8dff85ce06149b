"""Tasks and their data: the task registry (tasks), where a task's files are (task_folders), the readers (glue:
GLUE TSVs, CSV/JSON and the hub; conll; custom: a task of your own; synthetic: the built-in repeat task; lm: text
in blocks of T tokens), PAPA's token layout (preprocessing) and the tokenised cache (tokenized_cache)."""
