"""The Gemini API (generateContent): the only code that knows its shape."""
