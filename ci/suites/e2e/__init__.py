"""The end-to-end suite: the native API, the OpenAI API and frontend programs against a real server on the device."""
