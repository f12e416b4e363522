"""``python -m faultfinder.testing``: run the fake OpenAI server in its own process."""

from faultfinder.testing.fake_openai import main

main()
