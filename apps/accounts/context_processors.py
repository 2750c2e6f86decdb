from apps.accounts.models import Membership


def organizations(request) -> dict:
    """The signed-in user's organizations, for the switcher in the header."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"user_memberships": []}
    return {"user_memberships": Membership.objects.for_user(user)}
