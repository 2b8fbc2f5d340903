"""In-process engine: the same ServerApp loop and ClientApp, no Ray, no SuperLink."""
