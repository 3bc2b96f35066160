"""`archivist serve`: the stores as models behind the OpenAI chat-completions API.

`completions` holds what the API means in Archivist's terms (the models served, a request
read into a question and its history, a turn written back as a completion); `api` serves it
over HTTP.
"""
