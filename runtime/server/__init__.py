"""The HTTP server: SGLang's native API and the OpenAI API over one `TokenizerManager`."""
