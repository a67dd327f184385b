"""@deploy() units the entry scripts in deploys/ compose."""
