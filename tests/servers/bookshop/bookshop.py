"""A Django 5 site in one module, served by gunicorn: a category page listing its books with
each book's author. The slow variant (the default) lets the template read `book.author.name`
for every book, one query per book (the N+1 query); BOOKSHOP_FIXED=1 joins the authors in
(`select_related`). The database is SQLite at $BOOKSHOP_DB, built once by whichever worker
comes first.

    gunicorn -w 2 -b 127.0.0.1:PORT bookshop:application      # from this directory
"""
import fcntl
import os
import sys

import django
from django.conf import settings

DB = os.environ.get("BOOKSHOP_DB", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bookshop.sqlite3"))
FIXED = os.environ.get("BOOKSHOP_FIXED") == "1"

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="bookshop-test-only",
    INSTALLED_APPS=["django.contrib.contenttypes", "bookshop"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB}},
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "APP_DIRS": False}],
    USE_TZ=True,
)
sys.modules.setdefault("bookshop", sys.modules[__name__])
django.setup()

from django.db import connection, models  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.shortcuts import get_object_or_404  # noqa: E402
from django.template import Context, Engine  # noqa: E402
from django.urls import path  # noqa: E402


class Author(models.Model):
    name = models.CharField(max_length=100)

    class Meta:
        app_label = "bookshop"


class Category(models.Model):
    name = models.CharField(max_length=100)

    class Meta:
        app_label = "bookshop"


class Book(models.Model):
    title = models.CharField(max_length=200)
    author = models.ForeignKey(Author, on_delete=models.CASCADE)
    category = models.ForeignKey(Category, on_delete=models.CASCADE)

    class Meta:
        app_label = "bookshop"


PAGE = Engine().from_string(
    """<h1>{{ category.name }}</h1>
<ul>{% for book in books %}
<li>{{ book.title }} by {{ book.author.name }}</li>{% endfor %}
</ul>"""
)


def category_page(request, pk):
    category = get_object_or_404(Category, pk=pk)
    books = Book.objects.filter(category=category).order_by("id")
    if FIXED:
        books = books.select_related("author")
    html = PAGE.render(Context({"category": category, "books": books}))
    return HttpResponse(html)


def health(request):
    return HttpResponse("ok")


urlpatterns = [path("category/<int:pk>", category_page), path("health", health)]


def build_database():
    """Creates and fills the database once; the workers that start beside it wait for it."""
    with open(DB + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if "bookshop_book" in connection.introspection.table_names():
            return
        with connection.schema_editor() as editor:
            for model in (Author, Category, Book):
                editor.create_model(model)
        authors = Author.objects.bulk_create(Author(name=f"Author {i}") for i in range(200))
        categories = Category.objects.bulk_create(Category(name=f"Category {i}") for i in range(5))
        Book.objects.bulk_create(
            Book(title=f"Book {i}", author=authors[(i * 7) % len(authors)], category=categories[i % len(categories)])
            for i in range(600)
        )


build_database()

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
