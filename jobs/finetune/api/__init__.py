"""The coordinator's HTTP API: one router per resource over ``request.app.state.coordinator``,
the request and reply models in ``protocol``; ``hipbot.jobs.finetune.coordinator`` assembles them."""
