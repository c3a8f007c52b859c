#!/usr/bin/env python3
"""Writes superstore.csv: a synthetic sales table shaped like Tableau's "Sample - Superstore"
(the data set the seed articles analyse), with a fixed seed so that every run writes the same
bytes. Standard library only.

    python3 examples/data/make_superstore.py [--rows 3000] [--seed 20240601] [--out PATH]

Columns: Row ID, Order ID, Order Date, Ship Date, Ship Mode, Customer ID, Customer Name, Segment,
Country, City, State, Postal Code, Region, Product ID, Category, Sub-Category, Product Name,
Sales, Quantity, Discount, Profit. Dates are MM/DD/YYYY; Sales and Profit are in dollars.
"""
import argparse
import csv
import datetime
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

REGIONS = {  # region: (weight, [(city, state, postal code), ...])
    "West": (0.32, [("Los Angeles", "California", "90036"), ("San Francisco", "California", "94122"),
                    ("San Diego", "California", "92024"), ("Seattle", "Washington", "98103"),
                    ("Portland", "Oregon", "97206"), ("Denver", "Colorado", "80219"),
                    ("Phoenix", "Arizona", "85023")]),
    "East": (0.29, [("New York City", "New York", "10035"), ("Philadelphia", "Pennsylvania", "19140"),
                    ("Boston", "Massachusetts", "02108"), ("Columbus", "Ohio", "43229"),
                    ("Newark", "New Jersey", "07102"), ("Providence", "Rhode Island", "02908")]),
    "Central": (0.23, [("Houston", "Texas", "77095"), ("Dallas", "Texas", "75217"),
                       ("Chicago", "Illinois", "60623"), ("Detroit", "Michigan", "48205"),
                       ("Minneapolis", "Minnesota", "55407"), ("Indianapolis", "Indiana", "46203")]),
    "South": (0.16, [("Miami", "Florida", "33142"), ("Jacksonville", "Florida", "32216"),
                     ("Atlanta", "Georgia", "30318"), ("Charlotte", "North Carolina", "28205"),
                     ("Nashville", "Tennessee", "37211"), ("Richmond", "Virginia", "23223")]),
}
# discounts are more common in some regions, as in the original
DISCOUNTS = {"West": [0, 0, 0, 0, 0.1, 0.2], "East": [0, 0, 0, 0.1, 0.2, 0.3],
             "Central": [0, 0, 0.2, 0.3, 0.5, 0.8], "South": [0, 0, 0, 0.2, 0.45, 0.7]}

CATALOG = {  # category: {sub-category: (low price, high price, base margin, [nouns])}
    "Furniture": {
        "Bookcases": (80, 900, 0.08, ["Bookcase", "Corner Bookcase", "Barrister Bookcase"]),
        "Chairs": (60, 1100, 0.10, ["Task Chair", "Executive Chair", "Stacking Chair", "Guest Chair"]),
        "Furnishings": (8, 300, 0.18, ["Desk Lamp", "Wall Clock", "Frame", "Chair Mat"]),
        "Tables": (120, 1300, -0.05, ["Conference Table", "Folding Table", "Round Table"]),
    },
    "Office Supplies": {
        "Appliances": (15, 700, 0.20, ["Microwave", "Space Heater", "Surge Protector", "Air Purifier"]),
        "Art": (3, 60, 0.25, ["Pencils", "Markers", "Highlighters", "Sketch Pad"]),
        "Binders": (3, 200, 0.22, ["Ring Binder", "Binding Covers", "Presentation Binder"]),
        "Envelopes": (5, 60, 0.40, ["Security Envelopes", "Clasp Envelopes", "Mailers"]),
        "Fasteners": (2, 30, 0.30, ["Paper Clips", "Staples", "Thumb Tacks"]),
        "Labels": (3, 40, 0.42, ["Address Labels", "Color Coding Labels", "File Labels"]),
        "Paper": (6, 80, 0.43, ["Copy Paper", "Memo Pads", "Message Book", "Cardstock"]),
        "Storage": (15, 400, 0.09, ["File Cart", "Storage Box", "Shelving", "Drawer Organizer"]),
        "Supplies": (5, 150, 0.05, ["Scissors", "Letter Opener", "Trimmer"]),
    },
    "Technology": {
        "Accessories": (10, 300, 0.22, ["Wireless Mouse", "Keyboard", "Headset", "USB Flash Drive"]),
        "Copiers": (300, 3000, 0.32, ["Laser Copier", "Color Copier", "Multifunction Copier"]),
        "Machines": (100, 2500, 0.03, ["Label Printer", "Shredder", "Inkjet Printer", "Projector"]),
        "Phones": (30, 900, 0.13, ["Smartphone", "Conference Phone", "Cordless Phone", "Headset Phone"]),
    },
}
BRANDS = ["Acme", "Avery", "Belkin", "Bretford", "Bush", "Canon", "Cisco", "Eldon", "Fellowes",
          "Global", "Hon", "Logitech", "Novimex", "Okidata", "Sauder", "Samsung", "Tenex", "Xerox"]
FIRST = ["Aaron", "Alex", "Anna", "Brian", "Carla", "Chris", "Dana", "Daniel", "Elena", "Eric", "Grace",
         "Hannah", "Ivan", "Julia", "Kevin", "Laura", "Maria", "Nora", "Omar", "Paul", "Rita", "Sam",
         "Tara", "Victor", "Wendy", "Zoe"]
LAST = ["Adams", "Bell", "Brooks", "Chen", "Diaz", "Evans", "Foster", "Garcia", "Hughes", "Kim",
        "Lopez", "Miller", "Nguyen", "Olsen", "Patel", "Reed", "Shaw", "Turner", "Wallace", "Young"]
SEGMENTS = (["Consumer", "Corporate", "Home Office"], [0.52, 0.30, 0.18])
SHIP_MODES = {"Standard Class": (0.60, 4, 7), "Second Class": (0.20, 2, 4), "First Class": (0.15, 1, 3),
              "Same Day": (0.05, 0, 0)}


def make_products(rng):
    products = []
    for category, subs in CATALOG.items():
        for sub, (low, high, margin, nouns) in subs.items():
            for i in range(6):
                noun = nouns[i % len(nouns)]
                brand = rng.choice(BRANDS)
                product_id = f"{category[:3].upper()}-{sub[:2].upper()}-{10000000 + rng.randrange(9000000)}"
                # prices spread log-uniformly between the bounds, like a real catalogue
                price = round(low * (high / low) ** rng.random(), 2)
                products.append((product_id, category, sub, f"{brand} {noun} {rng.choice('ABCDEFGH')}{i + 1}0",
                                 price, margin))
    return products


def make_customers(rng, count=420):
    customers = []
    for i in range(count):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        customer_id = f"{first[0]}{last[0]}-{10000 + i * 37 % 9000 + i}"
        segment = rng.choices(*SEGMENTS)[0]
        customers.append((customer_id, f"{first} {last}", segment))
    return customers


def rows(rng, count):
    products, customers = make_products(rng), make_customers(rng)
    region_names = list(REGIONS)
    region_weights = [REGIONS[r][0] for r in region_names]
    mode_names = list(SHIP_MODES)
    mode_weights = [SHIP_MODES[m][0] for m in mode_names]
    start = datetime.date(2021, 1, 3)
    span = (datetime.date(2024, 12, 30) - start).days
    row_id, order_number = 0, 0
    while row_id < count:
        order_number += 1
        order_date = start + datetime.timedelta(days=rng.randrange(span + 1))
        order_id = f"{rng.choice(['CA', 'US'])}-{order_date.year}-{100000 + order_number * 7 + rng.randrange(7)}"
        mode = rng.choices(mode_names, mode_weights)[0]
        _, fastest, slowest = SHIP_MODES[mode]
        ship_date = order_date + datetime.timedelta(days=rng.randint(fastest, slowest))
        customer_id, customer_name, segment = rng.choice(customers)
        region = rng.choices(region_names, region_weights)[0]
        city, state, postal = rng.choice(REGIONS[region][1])
        for _ in range(rng.choices([1, 2, 3, 4, 5], [0.35, 0.25, 0.2, 0.12, 0.08])[0]):
            if row_id >= count:
                break
            row_id += 1
            product_id, category, sub, name, price, margin = rng.choice(products)
            quantity = rng.choices(range(1, 11), [14, 22, 18, 14, 10, 8, 6, 4, 2, 2])[0]
            discount = rng.choice(DISCOUNTS[region])
            sales = round(price * quantity * (1 - discount), 2)
            profit_rate = margin - 1.1 * discount + rng.gauss(0, 0.06)
            profit = round(sales * profit_rate, 2)
            yield [row_id, order_id, order_date.strftime("%m/%d/%Y"), ship_date.strftime("%m/%d/%Y"), mode,
                   customer_id, customer_name, segment, "United States", city, state, postal, region,
                   product_id, category, sub, name, f"{sales:.2f}", quantity, f"{discount:g}", f"{profit:.2f}"]


HEADER = ["Row ID", "Order ID", "Order Date", "Ship Date", "Ship Mode", "Customer ID", "Customer Name",
          "Segment", "Country", "City", "State", "Postal Code", "Region", "Product ID", "Category",
          "Sub-Category", "Product Name", "Sales", "Quantity", "Discount", "Profit"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--out", default=os.path.join(HERE, "superstore.csv"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows(rng, args.rows))
    print(f"wrote {args.rows} rows to {args.out}")


if __name__ == "__main__":
    main()
