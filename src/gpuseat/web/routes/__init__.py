"""The portal's routes by concern, one ``APIRouter`` named ``router`` per module (wired by
:func:`gpuseat.web.app.create_app`)."""
